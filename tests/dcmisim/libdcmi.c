/*
 * A test libdcmi.so: DCMI's calls, answered from the host the npu-smi simulator reads.
 *
 * The host is $ASCEND_NPU_SMI_SIM_DIR/host.json (ascend_dra/profiles/ascend/sim/npusmi_sim.py, write_host),
 * read again whenever the file changes, so one fake host drives both the npu-smi tier (through the
 * simulator) and the DCMI tier (through this library), and a test can change a chip's health
 * between two passes. Signatures, struct layouts and return codes follow DCMI's published header
 * dcmi_interface_api.h: 0 is success, errors are negative, -8255 means "not supported" (a chip
 * without a bus ID, an HBM call on a DDR chip, a field host.json leaves out). Calls before
 * dcmi_init return -8012 ("not ready"): our choice, the header does not say.
 *
 * Faults, for tests: each line of $ASCEND_NPU_SMI_SIM_DIR/dcmi-faults is
 *     <function name> <hang | crash | print | error code>[-after] [card device]
 * and makes that call (for that card and device only, when given) sleep forever, abort the
 * process, print a line on stdout and go on, or return the code. The file is read at every call.
 * With -after (the vNPU calls of vnpu.c only) the call first does its work (the vNPU is made or
 * destroyed, the state file written, its lock released), then hangs, aborts or returns the code:
 * a call whose effect happened although its caller saw no answer or an error.
 *
 * The vNPU calls (dcmi_create_vdevice, dcmi_set_destroy_vdevice, the VDEV_MNG queries of
 * dcmi_get_device_info) are in vnpu.c; what both files share in dcmisim.h.
 *
 * Built by tests/dcmisim/__init__.py with gcc; -DDCMI_SIM_MINIMAL builds a library that exports
 * dcmi_init alone (a library too old or too broken to be used).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcmisim.h"

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_die_id {
    unsigned int soc_die[DIE_ID_COUNT];
};

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

_Static_assert(sizeof(struct dcmi_pcie_info_all) == 64, "the header: dcmi_pcie_info_all is 64 bytes");

int dcmi_init(void);

#ifndef DCMI_SIM_MINIMAL

HIDDEN struct chip chips[MAX_CHIPS];
HIDDEN int nchips;
HIDDEN struct host_state host;
static char driver_version[TEXT];
HIDDEN int initialised;
static struct stat loaded;

/* ---- host.json: the subset of JSON write_host produces ---------------------------------------- */

HIDDEN void ws(struct cursor *c) { while (isspace((unsigned char)*c->s)) c->s++; }

HIDDEN int string(struct cursor *c, char *out, size_t n)
{
    size_t len = 0;
    ws(c);
    if (*c->s != '"') return -1;
    for (c->s++; *c->s && *c->s != '"'; c->s++) {
        char ch = *c->s;
        if (ch == '\\' && c->s[1]) ch = *++c->s;
        if (out && len + 1 < n) out[len++] = ch;
    }
    if (*c->s != '"') return -1;
    c->s++;
    if (out) out[len] = '\0';
    return 0;
}

HIDDEN int skip(struct cursor *c)
{
    ws(c);
    if (*c->s == '"') return string(c, NULL, 0);
    if (*c->s == '{' || *c->s == '[') {
        char close = *c->s == '{' ? '}' : ']';
        c->s++;
        for (;;) {
            ws(c);
            if (*c->s == close) { c->s++; return 0; }
            if (close == '}') {
                if (string(c, NULL, 0)) return -1;
                ws(c);
                if (*c->s++ != ':') return -1;
            }
            if (skip(c)) return -1;
            ws(c);
            if (*c->s == ',') c->s++;
        }
    }
    if (!*c->s) return -1;
    while (*c->s && !strchr(",}] \t\r\n", *c->s)) c->s++;
    return 0;
}

/* A number, or null (returns 1: absent). */
HIDDEN int number(struct cursor *c, long long *out)
{
    char *end;
    ws(c);
    if (!strncmp(c->s, "null", 4)) { c->s += 4; return 1; }
    *out = strtoll(c->s, &end, 0);
    if (end == c->s) return -1;
    c->s = end;
    return 0;
}

/* A string, or null (returns 1). */
HIDDEN int text(struct cursor *c, char *out, size_t n)
{
    ws(c);
    if (!strncmp(c->s, "null", 4)) { c->s += 4; return 1; }
    return string(c, out, n);
}

static const char *HEALTH[] = {"OK", "Warning", "Alarm", "Critical", "UNKNOWN"};

static int chip_field(struct cursor *c, struct chip *chip, const char *key)
{
    char buf[TEXT];
    int r;
    if (!strcmp(key, "npu_id")) return number(c, &chip->npu_id);
    if (!strcmp(key, "chip_id")) return number(c, &chip->chip_id);
    if (!strcmp(key, "logic_id")) return number(c, &chip->logic_id);
    if (!strcmp(key, "physical_id")) return number(c, &chip->physical_id);
    if (!strcmp(key, "model")) return text(c, chip->model, sizeof chip->model) < 0 ? -1 : 0;
    if (!strcmp(key, "memory_kind")) return text(c, chip->memory_kind, sizeof chip->memory_kind) < 0 ? -1 : 0;
    if (!strcmp(key, "bus_id")) {
        r = text(c, chip->bus_id, sizeof chip->bus_id);
        chip->has_bus = r == 0 && strcmp(chip->bus_id, "NA") != 0;
        return r < 0 ? -1 : 0;
    }
    if (!strcmp(key, "memory_mib")) { r = number(c, &chip->memory_mib); chip->has_memory = r == 0; return r < 0; }
    if (!strcmp(key, "aicore")) { r = number(c, &chip->aicore); chip->has_aicore = r == 0; return r < 0; }
    if (!strcmp(key, "aicore_util")) { r = number(c, &chip->util); chip->has_util = r == 0; return r < 0; }
    if (!strcmp(key, "memory_used_mib")) { r = number(c, &chip->used_mib); chip->has_used = r == 0; return r < 0; }
    if (!strcmp(key, "temperature_c")) { r = number(c, &chip->temp); chip->has_temp = r == 0; return r < 0; }
    if (!strcmp(key, "power_w")) {  /* watts, maybe with a fraction; DCMI gives tenths of a watt */
        char *end;
        ws(c);
        if (!strncmp(c->s, "null", 4)) { c->s += 4; return 0; }
        double watts = strtod(c->s, &end);
        if (end == c->s) return -1;
        c->s = end;
        chip->power_dw = (long long)(watts * 10 + 0.5);
        chip->has_power = 1;
        return 0;
    }
    if (!strcmp(key, "pci_device_id")) {
        r = text(c, buf, sizeof buf);
        if (r == 0) { chip->pci_device_id = (unsigned int)strtoul(buf, NULL, 16); chip->has_pci = 1; }
        return r < 0 ? -1 : 0;
    }
    if (!strcmp(key, "health")) {
        ws(c);
        if (*c->s != '"') { r = number(c, &chip->health); chip->has_health = r == 0; return r < 0; }
        if (text(c, chip->health_name, sizeof chip->health_name)) return -1;
        for (size_t i = 0; i < sizeof HEALTH / sizeof HEALTH[0]; i++)
            if (!strcmp(chip->health_name, HEALTH[i])) { chip->health = (long long)i; chip->has_health = 1; }
        return 0;
    }
    if (!strcmp(key, "vnpu")) return vnpu_facts(c, chip);
    if (!strcmp(key, "die_id")) {  /* five 8-hex groups separated by '-' or ' ' */
        r = text(c, buf, sizeof buf);
        if (r) return r < 0 ? -1 : 0;
        char *p = buf;
        for (int i = 0; i < DIE_ID_COUNT; i++) {
            char *end;
            chip->die[i] = (unsigned int)strtoul(p, &end, 16);
            if (end == p) return -1;
            p = end + (*end ? 1 : 0);
        }
        chip->has_die = 1;
        return 0;
    }
    return skip(c);
}

static int parse_host(const char *s)
{
    struct cursor c = {s};
    char key[TEXT];
    nchips = 0;
    driver_version[0] = '\0';
    memset(&host, 0, sizeof host);
    host.recover = 1;
    ws(&c);
    if (*c.s++ != '{') return -1;
    for (;;) {
        ws(&c);
        if (*c.s == '}') return 0;
        if (string(&c, key, sizeof key)) return -1;
        ws(&c);
        if (*c.s++ != ':') return -1;
        if (!strcmp(key, "driver_version")) {
            if (text(&c, driver_version, sizeof driver_version) < 0) return -1;
        } else if (!strcmp(key, "boot_id_file")) {
            if (text(&c, host.boot_id_file, sizeof host.boot_id_file) < 0) return -1;
        } else if (!strcmp(key, "dev_dir")) {
            if (text(&c, host.dev_dir, sizeof host.dev_dir) < 0) return -1;
        } else if (!strcmp(key, "vnpu_cfg_recover")) {
            ws(&c);
            host.recover = strncmp(c.s, "false", 5) != 0;
            if (skip(&c)) return -1;
        } else if (!strcmp(key, "chips")) {
            ws(&c);
            if (*c.s++ != '[') return -1;
            for (;;) {
                ws(&c);
                if (*c.s == ']') { c.s++; break; }
                if (*c.s++ != '{' || nchips == MAX_CHIPS) return -1;
                struct chip *chip = &chips[nchips++];
                memset(chip, 0, sizeof *chip);
                for (;;) {
                    ws(&c);
                    if (*c.s == '}') { c.s++; break; }
                    if (string(&c, key, sizeof key)) return -1;
                    ws(&c);
                    if (*c.s++ != ':' || chip_field(&c, chip, key)) return -1;
                    ws(&c);
                    if (*c.s == ',') c.s++;
                }
                ws(&c);
                if (*c.s == ',') c.s++;
            }
        } else if (skip(&c)) {
            return -1;
        }
        ws(&c);
        if (*c.s == ',') c.s++;
    }
}

/* (Re)read host.json when it changed since the last call. */
HIDDEN int load_host(void)
{
    const char *dir = getenv("ASCEND_NPU_SMI_SIM_DIR");
    char path[4096];
    struct stat st;
    if (!dir) return ERR_FILE_OPERATE;
    snprintf(path, sizeof path, "%s/host.json", dir);
    if (stat(path, &st)) return ERR_FILE_OPERATE;
    if (st.st_ino == loaded.st_ino && st.st_size == loaded.st_size && st.st_mtim.tv_sec == loaded.st_mtim.tv_sec
        && st.st_mtim.tv_nsec == loaded.st_mtim.tv_nsec)
        return DCMI_OK;
    FILE *f = fopen(path, "r");
    if (!f) return ERR_FILE_OPERATE;
    char *buf = calloc(1, (size_t)st.st_size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    int bad = !buf || got != (size_t)st.st_size || parse_host(buf);
    free(buf);
    if (bad) { memset(&loaded, 0, sizeof loaded); return ERR_FILE_OPERATE; }
    loaded = st;
    return DCMI_OK;
}

/* ---- faults ------------------------------------------------------------------------------------- */

static char late_action[64];

HIDDEN int fault(const char *function, int card, int device)
{
    const char *dir = getenv("ASCEND_NPU_SMI_SIM_DIR");
    char path[4096], line[256], name[128], action[64];
    int code = DCMI_OK;
    late_action[0] = '\0';
    if (!dir) return DCMI_OK;
    snprintf(path, sizeof path, "%s/dcmi-faults", dir);
    FILE *f = fopen(path, "r");
    if (!f) return DCMI_OK;
    while (fgets(line, sizeof line, f)) {
        int fcard, fdevice;
        int n = sscanf(line, "%127s %63s %d %d", name, action, &fcard, &fdevice);
        if (n < 2 || strcmp(name, function)) continue;
        if (n == 4 && (fcard != card || fdevice != device)) continue;
        size_t len = strlen(action);
        if (len > 6 && !strcmp(action + len - 6, "-after")) {  /* applied by late(), once the call's work is done */
            action[len - 6] = '\0';
            snprintf(late_action, sizeof late_action, "%s", action);
            break;
        }
        if (!strcmp(action, "hang")) for (;;) pause();
        if (!strcmp(action, "crash")) abort();
        if (!strcmp(action, "print")) { printf("dcmi: %s called\n", function); fflush(stdout); continue; }
        code = atoi(action);
        break;
    }
    fclose(f);
    return code;
}

HIDDEN int late(int rc)
{
    char action[64];
    if (!late_action[0]) return rc;
    snprintf(action, sizeof action, "%s", late_action);
    late_action[0] = '\0';
    if (!strcmp(action, "hang")) for (;;) pause();
    if (!strcmp(action, "crash")) abort();
    return atoi(action);
}

HIDDEN struct chip *find(int card, int device)
{
    for (int i = 0; i < nchips; i++)
        if (chips[i].npu_id == card && chips[i].chip_id == device) return &chips[i];
    return NULL;
}

static int chips_in_card(int card)
{
    int n = 0;
    for (int i = 0; i < nchips; i++) n += chips[i].npu_id == card;
    return n;
}

static int copy_text(char *out, unsigned int len, const char *value)
{
    if (!out || len < strlen(value) + 1) return ERR_INVALID_PARAMETER;
    memcpy(out, value, strlen(value) + 1);
    return DCMI_OK;
}

#define CHIP(card, device, out)                               \
    struct chip *chip;                                        \
    ENTER(card, device);                                      \
    if (!(out)) return ERR_INVALID_PARAMETER;                 \
    if (!(chip = find(card, device))) return ERR_INVALID_DEVICE_ID

/* ---- the calls ---------------------------------------------------------------------------------- */

int dcmi_init(void)
{
    int rc = fault(__func__, -1, -1);
    if (rc) return rc;
    if ((rc = load_host())) return rc;
    initialised = 1;
    return DCMI_OK;
}

int dcmi_get_dcmi_version(char *dcmi_ver, unsigned int len)
{
    ENTER(-1, -1);
    return copy_text(dcmi_ver, len, "ascend-dra test DCMI 1");
}

int dcmi_get_driver_version(char *driver_ver, unsigned int len)
{
    ENTER(-1, -1);
    if (!driver_version[0]) return ERR_NOT_SUPPORT;
    return copy_text(driver_ver, len, driver_version);
}

int dcmi_get_card_list(int *card_num, int *card_list, int list_len)
{
    int cards[MAX_CHIPS], n = 0;
    ENTER(-1, -1);
    if (!card_num || !card_list) return ERR_INVALID_PARAMETER;
    for (int i = 0; i < nchips; i++) {  /* the NPU IDs, ascending, each once */
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= cards[k] == chips[i].npu_id;
        if (!seen) cards[n++] = (int)chips[i].npu_id;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (cards[b] < cards[a]) { int t = cards[a]; cards[a] = cards[b]; cards[b] = t; }
    if (list_len < n) return ERR_INVALID_PARAMETER;
    memcpy(card_list, cards, (size_t)n * sizeof(int));
    *card_num = n;
    return DCMI_OK;
}

int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    ENTER(card_id, -1);
    if (!device_num) return ERR_INVALID_PARAMETER;
    if (!(*device_num = chips_in_card(card_id))) return ERR_INVALID_DEVICE_ID;
    return DCMI_OK;
}

int dcmi_get_device_id_in_card(int card_id, int *device_id_max, int *mcu_id, int *cpu_id)
{
    ENTER(card_id, -1);
    if (!device_id_max || !mcu_id || !cpu_id) return ERR_INVALID_PARAMETER;
    if (!(*device_id_max = chips_in_card(card_id))) return ERR_INVALID_DEVICE_ID;
    *mcu_id = -1;
    *cpu_id = -1;
    return DCMI_OK;
}

int dcmi_get_device_type(int card_id, int device_id, int *device_type)
{
    CHIP(card_id, device_id, device_type);
    *device_type = 0;  /* NPU_TYPE */
    return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
    CHIP(card_id, device_id, device_logic_id);
    *device_logic_id = (int)chip->logic_id;
    return DCMI_OK;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid)
{
    ENTER(-1, -1);
    if (!phyid) return ERR_INVALID_PARAMETER;
    for (int i = 0; i < nchips; i++)
        if (chips[i].logic_id == (long long)logicid) { *phyid = (unsigned int)chips[i].physical_id; return DCMI_OK; }
    return ERR_INVALID_DEVICE_ID;
}

int dcmi_get_device_logicid_from_phyid(unsigned int phyid, unsigned int *logicid)
{
    ENTER(-1, -1);
    if (!logicid) return ERR_INVALID_PARAMETER;
    for (int i = 0; i < nchips; i++)
        if (chips[i].physical_id == (long long)phyid) { *logicid = (unsigned int)chips[i].logic_id; return DCMI_OK; }
    return ERR_INVALID_DEVICE_ID;
}

int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int device_logic_id)
{
    ENTER(-1, -1);
    if (!card_id || !device_id) return ERR_INVALID_PARAMETER;
    for (int i = 0; i < nchips; i++)
        if (chips[i].logic_id == (long long)device_logic_id) {
            *card_id = (int)chips[i].npu_id;
            *device_id = (int)chips[i].chip_id;
            return DCMI_OK;
        }
    return ERR_INVALID_DEVICE_ID;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info)
{
    CHIP(card_id, device_id, chip_info);
    memset(chip_info, 0, sizeof *chip_info);
    snprintf((char *)chip_info->chip_type, MAX_CHIP_NAME_LEN, "Ascend");
    snprintf((char *)chip_info->chip_name, MAX_CHIP_NAME_LEN, "%.31s", chip->model);
    snprintf((char *)chip_info->chip_ver, MAX_CHIP_NAME_LEN, "V1");
    chip_info->aicore_cnt = chip->has_aicore ? (unsigned int)chip->aicore : 8255;  /* as DCMI passes it on */
    return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info)
{
    unsigned int domain, bus, device, function;
    CHIP(card_id, device_id, pcie_info);
    if (!chip->has_bus || sscanf(chip->bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        return ERR_NOT_SUPPORT;
    memset(pcie_info, 0, sizeof *pcie_info);
    pcie_info->venderid = 0x19e5;
    pcie_info->deviceid = chip->has_pci ? chip->pci_device_id : 0;
    pcie_info->domain = (int)domain;
    pcie_info->bdf_busid = bus;
    pcie_info->bdf_deviceid = device;
    pcie_info->bdf_funcid = function;
    return DCMI_OK;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
    CHIP(card_id, device_id, health);
    *health = chip->has_health ? (unsigned int)chip->health : 0;
    return DCMI_OK;
}

int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *error_code_list,
                                 unsigned int list_len)
{
    CHIP(card_id, device_id, error_count);
    if (!error_code_list || !list_len) return ERR_INVALID_PARAMETER;
    *error_count = 0;
    return DCMI_OK;
}

int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id)
{
    CHIP(card_id, device_id, die_id);
    int ddie = !strncmp(chip->model, "950", 3) || !strncmp(chip->model, "Ascend950", 9);
    if (!chip->has_die || input_type != (ddie ? 2 : 1)) return ERR_NOT_SUPPORT;
    memcpy(die_id->soc_die, chip->die, sizeof chip->die);
    return DCMI_OK;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info)
{
    CHIP(card_id, device_id, hbm_info);
    if (strcmp(chip->memory_kind, "HBM") || !chip->has_memory) return ERR_NOT_SUPPORT;
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = (unsigned long long)chip->memory_mib;
    hbm_info->memory_usage = chip->has_used ? (unsigned long long)chip->used_mib : 0;
    return DCMI_OK;
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info)
{
    CHIP(card_id, device_id, memory_info);
    if (strcmp(chip->memory_kind, "DDR") || !chip->has_memory) return ERR_NOT_SUPPORT;
    memset(memory_info, 0, sizeof *memory_info);
    memory_info->memory_size = (unsigned long long)chip->memory_mib;
    memory_info->memory_available = (unsigned long long)(chip->memory_mib - (chip->has_used ? chip->used_mib : 0));
    return DCMI_OK;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate)
{
    CHIP(card_id, device_id, utilization_rate);
    (void)input_type;
    *utilization_rate = chip->has_util ? (unsigned int)chip->util : 0;
    return DCMI_OK;
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature)
{
    CHIP(card_id, device_id, temperature);
    if (!chip->has_temp) return ERR_NOT_SUPPORT;
    *temperature = (int)chip->temp;
    return DCMI_OK;
}

/* Tenths of a watt, as npu-smi divides it by 10 for Power(W); not supported where host.json has none
 * (the 310P, whose npu-smi prints NA). */
int dcmi_get_device_power_info(int card_id, int device_id, int *power)
{
    CHIP(card_id, device_id, power);
    if (!chip->has_power) return ERR_NOT_SUPPORT;
    *power = (int)chip->power_dw;
    return DCMI_OK;
}

#else /* DCMI_SIM_MINIMAL */

int dcmi_init(void) { return DCMI_OK; }

#endif
