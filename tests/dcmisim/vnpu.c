/*
 * The test libdcmi.so's vNPU calls (and dcmi_get_vnpu_config_recover_mode), on the state the npu-smi
 * simulator keeps (ascend_dra/profiles/ascend/sim/npusmi_sim.py): $ASCEND_NPU_SMI_SIM_DIR/vnpus.json, read and replaced
 * under an flock of $ASCEND_NPU_SMI_SIM_DIR/lock (the simulator's lock), with the simulator's rules, so
 * a vNPU made here is listed by `npu-smi info -t info-vnpu` and the reverse:
 *
 * - a create names a template of the chip's (host.json "vnpu" object, written from the template
 *   catalogue) and a free vNPU ID physicalID x 16 + 100 + k, k below the chip's ID slots (0xFFFFFFFF:
 *   the first free one); at most max vNPUs; AI cores, memory, AICPUs and engines must fit what is
 *   free. It makes vdavinci<ID> under host.json's dev_dir (a character device 1:3, else an empty file).
 * - a reboot (a boot id other than the one vnpus.json was written in) keeps the vNPUs while
 *   vnpu-cfg-recover is enabled (the file vnpu-cfg-recover, else host.json's vnpu_cfg_recover), and
 *   forgets them while it is disabled.
 *
 * Return codes are the header's; which one a rule gives is ours (no capture of a refused create
 * exists): a template the chip does not take or an ID out of range -8001 (invalid parameter), an ID
 * in use, no vNPU left or too few resources -8020 (resource occupied), a model without vNPUs -8255
 * (not supported), a vNPU that does not exist -8001.
 *
 * Struct layouts: dcmi_interface_api.h, field by field (tests/unit/test_dcmi_vnpu.py compares
 * their offsets with ascend_dra/profiles/ascend/dcmi/api.py).
 */
#ifndef DCMI_SIM_MINIMAL

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dcmisim.h"

#define DCMI_VDEV_RES_NAME_LEN 16
#define DCMI_VDEV_FOR_RESERVE 32
#define DCMI_VDEV_SIZE 20
#define DCMI_SOC_SPLIT_MAX 32
#define TEMPLATE_NAME_LEN 32
#define DCMI_MAIN_CMD_VDEV_MNG 52
#define DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE 0
#define DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE 1
#define VDEV_ID_ANY 0xFFFFFFFFu
#define VNPU_ID_BASE 100
#define VNPU_ID_STRIDE 16
#define MAX_VNPUS 512

struct dcmi_create_vdev_out {
    unsigned int vdev_id;
    unsigned int pcie_bus;
    unsigned int pcie_device;
    unsigned int pcie_func;
    unsigned int vfg_id;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_create_vdev_res_stru {
    unsigned int vdev_id;
    unsigned int vfg_id;
    char template_name[TEMPLATE_NAME_LEN];
    unsigned char reserved[64];
};

struct dcmi_base_resource {
    unsigned long long token;
    unsigned long long token_max;
    unsigned long long task_timeout;
    unsigned int vfg_id;
    unsigned char vip_mode;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - 1];
};

struct dcmi_computing_resource {
    float aic;
    float aiv;
    unsigned short dsa;
    unsigned short rtsq;
    unsigned short acsq;
    unsigned short cdqm;
    unsigned short c_core;
    unsigned short ffts;
    unsigned short sdma;
    unsigned short pcie_dma;
    unsigned long long memory_size;
    unsigned int event_id;
    unsigned int notify_id;
    unsigned int stream_id;
    unsigned int model_id;
    unsigned short topic_schedule_aicpu;
    unsigned short host_ctrl_cpu;
    unsigned short host_aicpu;
    unsigned short device_aicpu;
    unsigned short topic_ctrl_cpu_slot;
    unsigned int vdev_aicore_utilization;
    unsigned long long vdev_memory_total;
    unsigned long long vdev_memory_free;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE - DCMI_VDEV_SIZE];
};

struct dcmi_media_resource {
    float jpegd;
    float jpege;
    float vpc;
    float vdec;
    float pngd;
    float venc;
    unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_vdev_query_info {
    char name[DCMI_VDEV_RES_NAME_LEN];
    unsigned int status;
    unsigned int is_container_used;
    unsigned int vfid;
    unsigned int vfg_id;
    unsigned long long container_id;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

struct dcmi_vdev_query_stru {
    unsigned int vdev_id;
    struct dcmi_vdev_query_info query_info;
};

struct dcmi_soc_total_resource {
    unsigned int vdev_num;
    unsigned int vdev_id[DCMI_SOC_SPLIT_MAX];
    unsigned int vfg_num;
    unsigned int vfg_bitmap;
    struct dcmi_base_resource base;
    struct dcmi_computing_resource computing;
    struct dcmi_media_resource media;
};

_Static_assert(sizeof(struct dcmi_create_vdev_res_stru) == 104, "dcmi_create_vdev_res_stru");
_Static_assert(sizeof(struct dcmi_create_vdev_out) == 52, "dcmi_create_vdev_out");
_Static_assert(sizeof(struct dcmi_vdev_query_stru) == 264, "dcmi_vdev_query_stru");
_Static_assert(sizeof(struct dcmi_soc_total_resource) == 360, "dcmi_soc_total_resource");

/* ---- host.json's "vnpu": {"slots": n, "max": n|null, "total": [9], "templates": [[name, 9 x n|null]]} ---- */

/* The next key of an object whose '{' is read: 0 and the key (its ':' read), 1 at the closing '}', -1 on
 * anything else. A ',' before the key is skipped. */
static int next_key(struct cursor *c, char *key, size_t n)
{
    ws(c);
    if (*c->s == ',') c->s++;
    ws(c);
    if (*c->s == '}') { c->s++; return 1; }
    if (string(c, key, n)) return -1;
    ws(c);
    if (*c->s++ != ':') return -1;
    ws(c);
    return 0;
}

/* NRES numbers (null: unknown), comma-separated, then the closing ']'. */
static int numbers(struct cursor *c, long long *out, long long unknown)
{
    for (int i = 0; i < NRES; i++) {
        ws(c);
        if (*c->s == ',') c->s++;
        int r = number(c, &out[i]);
        if (r < 0) return -1;
        if (r == 1) out[i] = unknown;
    }
    ws(c);
    return *c->s++ == ']' ? 0 : -1;
}

HIDDEN int vnpu_facts(struct cursor *c, struct chip *chip)
{
    char key[TEXT];
    ws(c);
    if (!strncmp(c->s, "null", 4)) { c->s += 4; return 0; }
    if (*c->s++ != '{') return -1;
    chip->has_vnpu = 1;
    chip->max_vnpus = -1;
    for (int r; (r = next_key(c, key, sizeof key)) != 1;) {
        if (r) return -1;
        if (!strcmp(key, "slots")) {
            if (number(c, &chip->id_slots)) return -1;
        } else if (!strcmp(key, "max")) {
            if (number(c, &chip->max_vnpus) < 0) return -1;
        } else if (!strcmp(key, "total")) {
            if (*c->s++ != '[' || numbers(c, chip->total, -1)) return -1;
        } else if (!strcmp(key, "templates")) {
            if (*c->s++ != '[') return -1;
            for (;;) {
                ws(c);
                if (*c->s == ']') { c->s++; break; }
                if (*c->s == ',') { c->s++; continue; }
                if (*c->s++ != '[' || chip->ntemplates == MAX_TEMPLATES) return -1;
                struct vtemplate *t = &chip->templates[chip->ntemplates++];
                if (string(c, t->name, sizeof t->name) || numbers(c, t->need, 0)) return -1;
            }
        } else if (skip(c)) {
            return -1;
        }
    }
    return 0;
}

/* ---- vnpus.json, as the simulator reads and writes it ------------------------------------------ */

struct vnpu {
    long long npu_id, chip_id, vnpu_id, vgroup_id;
    char template_name[TEMPLATE_NAME_LEN];
};

static struct vnpu vnpus[MAX_VNPUS];
static int nvnpus;

static void sim_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", getenv("ASCEND_NPU_SMI_SIM_DIR"), name);
}

/* The first line of a file, without surrounding blanks ("" when it cannot be read). */
static void first_line(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (!f) return;
    if (!fgets(out, (int)n, f)) out[0] = '\0';
    fclose(f);
    size_t len = strlen(out);
    while (len && (out[len - 1] == '\n' || out[len - 1] == ' ' || out[len - 1] == '\t' || out[len - 1] == '\r'))
        out[--len] = '\0';
}

static void boot_id(char *out, size_t n)
{
    if (host.boot_id_file[0]) first_line(host.boot_id_file, out, n);
    else out[0] = '\0';
}

/* vnpu-cfg-recover: the last `set -t vnpu-cfg-recover`, else host.json's, else enabled. */
static int recovers(void)
{
    char path[4096], mode[16];
    sim_path(path, sizeof path, "vnpu-cfg-recover");
    if (access(path, F_OK) == 0) {
        first_line(path, mode, sizeof mode);
        return !strcmp(mode, "1");
    }
    return host.recover;
}

/* vdavinci<id> under dev_dir: made (a character device 1:3, else an empty file) or removed. */
static void node(long long vnpu_id, int create)
{
    char path[4200];
    if (!host.dev_dir[0]) return;
    snprintf(path, sizeof path, "%s/vdavinci%lld", host.dev_dir, vnpu_id);
    if (!create) { unlink(path); return; }
    mkdir(host.dev_dir, 0755);
    if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0 || errno == EEXIST) return;
    int fd = open(path, O_WRONLY | O_CREAT, 0666);
    if (fd >= 0) close(fd);
}

static int vnpu_entry(struct cursor *c, struct vnpu *v)
{
    char key[TEXT];
    memset(v, 0, sizeof *v);
    if (*c->s++ != '{') return -1;
    for (int k; (k = next_key(c, key, sizeof key)) != 1;) {
        if (k) return -1;
        int r = !strcmp(key, "npu_id") ? number(c, &v->npu_id)
              : !strcmp(key, "chip_id") ? number(c, &v->chip_id)
              : !strcmp(key, "vnpu_id") ? number(c, &v->vnpu_id)
              : !strcmp(key, "vgroup_id") ? number(c, &v->vgroup_id)
              : !strcmp(key, "template") ? text(c, v->template_name, sizeof v->template_name)
              : skip(c);
        if (r) return -1;
    }
    return 0;
}

/* The vNPUs that exist now (the simulator's Sim.load): after a reboot, those of the last boot
 * while vnpu-cfg-recover is enabled (their nodes made again), none while it is disabled. */
static int load_vnpus(void)
{
    char path[4096], key[TEXT], written[256] = "", now[256];
    struct stat st;
    nvnpus = 0;
    boot_id(now, sizeof now);
    sim_path(path, sizeof path, "vnpus.json");
    if (stat(path, &st)) return errno == ENOENT ? DCMI_OK : ERR_FILE_OPERATE;
    FILE *f = fopen(path, "r");
    char *buf = f ? calloc(1, (size_t)st.st_size + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    if (f) fclose(f);
    if (!buf || got != (size_t)st.st_size) { free(buf); return ERR_FILE_OPERATE; }
    struct cursor c = {buf};
    int bad = 0;
    ws(&c);
    if (*c.s++ != '{') bad = 1;
    for (int k; !bad && (k = next_key(&c, key, sizeof key)) != 1;) {
        if (k) { bad = 1; break; }
        if (!strcmp(key, "boot_id")) {
            bad = text(&c, written, sizeof written) < 0;
        } else if (!strcmp(key, "vnpus")) {
            if (*c.s++ != '[') { bad = 1; break; }
            for (;;) {
                ws(&c);
                if (*c.s == ']') { c.s++; break; }
                if (*c.s == ',') { c.s++; continue; }
                if (nvnpus == MAX_VNPUS || vnpu_entry(&c, &vnpus[nvnpus++])) { bad = 1; break; }
            }
        } else {
            bad = skip(&c);
        }
    }
    free(buf);
    if (bad) { nvnpus = 0; return ERR_FILE_OPERATE; }
    if (strcmp(written, now)) {
        int restored = recovers();
        for (int i = 0; i < nvnpus; i++) node(vnpus[i].vnpu_id, restored);
        if (!restored) nvnpus = 0;
    }
    return DCMI_OK;
}

/* JSON string contents (boot ids, template names: no control characters expected). */
static void json_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

/* Replace vnpus.json atomically and durably (a temp file, fsync, rename, fsync of the directory). */
static int save_vnpus(void)
{
    char path[4096], tmp[4200], now[256];
    boot_id(now, sizeof now);
    sim_path(path, sizeof path, "vnpus.json");
    snprintf(tmp, sizeof tmp, "%s/.vnpus.json.%d.dcmi.tmp", getenv("ASCEND_NPU_SMI_SIM_DIR"), (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ERR_FILE_OPERATE;
    fputs("{\"boot_id\": \"", f);
    json_text(f, now);
    fputs("\", \"vnpus\": [", f);
    for (int i = 0; i < nvnpus; i++) {
        struct vnpu *v = &vnpus[i];
        fprintf(f, "%s{\"npu_id\": %lld, \"chip_id\": %lld, \"vnpu_id\": %lld, \"vgroup_id\": %lld, \"template\": \"",
                i ? ", " : "", v->npu_id, v->chip_id, v->vnpu_id, v->vgroup_id);
        json_text(f, v->template_name);
        fputs("\"}", f);
    }
    fputs("]}", f);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) { unlink(tmp); return ERR_FILE_OPERATE; }
    int dir = open(getenv("ASCEND_NPU_SMI_SIM_DIR"), O_RDONLY | O_DIRECTORY);
    if (dir >= 0) { fsync(dir); close(dir); }
    return DCMI_OK;
}

/* The simulator's lock: held from the read of vnpus.json to its replacement. */
static int lock_state(void)
{
    char path[4096];
    sim_path(path, sizeof path, "lock");
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX)) { close(fd); fd = -1; }
    return fd;
}

static struct vtemplate *template_of(struct chip *chip, const char *name)
{
    for (int i = 0; i < chip->ntemplates; i++)
        if (!strcmp(chip->templates[i].name, name)) return &chip->templates[i];
    return NULL;
}

static int on_chip(struct vnpu *v, struct chip *chip)
{
    return v->npu_id == chip->npu_id && v->chip_id == chip->chip_id;
}

static long long first_id(struct chip *chip)
{
    return chip->physical_id * VNPU_ID_STRIDE + VNPU_ID_BASE;
}

static struct vnpu *vnpu_at(struct chip *chip, long long vnpu_id)
{
    for (int i = 0; i < nvnpus; i++)
        if (on_chip(&vnpus[i], chip) && vnpus[i].vnpu_id == vnpu_id) return &vnpus[i];
    return NULL;
}

/* The simulator's Sim.create, rule by rule; the vNPU is appended to vnpus[]. */
static int create_on(struct chip *chip, const struct dcmi_create_vdev_res_stru *vdev, struct dcmi_create_vdev_out *out)
{
    char name[TEMPLATE_NAME_LEN];
    long long used[NRES] = {0}, vnpu_id = vdev->vdev_id, mine = 0;
    unsigned long long groups = 0;
    size_t len = strnlen(vdev->template_name, TEMPLATE_NAME_LEN);
    if (len == TEMPLATE_NAME_LEN) return ERR_INVALID_PARAMETER;  /* not NUL-terminated */
    memcpy(name, vdev->template_name, len + 1);
    struct vtemplate *t = template_of(chip, name);
    if (!t) return ERR_INVALID_PARAMETER;
    for (int i = 0; i < nvnpus; i++) {
        if (!on_chip(&vnpus[i], chip)) continue;
        mine++;
        if (vnpus[i].vgroup_id < 64) groups |= 1ull << vnpus[i].vgroup_id;
        struct vtemplate *u = template_of(chip, vnpus[i].template_name);
        for (int r = 0; u && r < NRES; r++) used[r] += u->need[r];
    }
    if (vdev->vdev_id == VDEV_ID_ANY) {
        for (vnpu_id = first_id(chip); vnpu_id < first_id(chip) + chip->id_slots && vnpu_at(chip, vnpu_id); vnpu_id++) {}
        if (vnpu_id == first_id(chip) + chip->id_slots) return ERR_RESOURCE_OCCUPIED;
    }
    if (vnpu_id < first_id(chip) || vnpu_id >= first_id(chip) + chip->id_slots) return ERR_INVALID_PARAMETER;
    if (vnpu_at(chip, vnpu_id)) return ERR_RESOURCE_OCCUPIED;
    if (chip->max_vnpus >= 0 && mine >= chip->max_vnpus) return ERR_RESOURCE_OCCUPIED;
    for (int r = 0; r < NRES; r++)
        if (t->need[r] && chip->total[r] >= 0 && used[r] + t->need[r] > chip->total[r]) return ERR_RESOURCE_OCCUPIED;
    if (nvnpus == MAX_VNPUS) return ERR_RESOURCE_OCCUPIED;
    long long group = 0;
    while (group < 64 && (groups >> group) & 1) group++;
    struct vnpu *v = &vnpus[nvnpus++];
    memset(v, 0, sizeof *v);
    v->npu_id = chip->npu_id;
    v->chip_id = chip->chip_id;
    v->vnpu_id = vnpu_id;
    v->vgroup_id = group;
    memcpy(v->template_name, name, len + 1);
    memset(out, 0, sizeof *out);
    out->vdev_id = (unsigned int)vnpu_id;
    out->vfg_id = (unsigned int)group;
    return DCMI_OK;
}

/* ---- the calls ---------------------------------------------------------------------------------- */

int dcmi_create_vdevice(int card_id, int device_id, struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out)
{
    struct chip *chip;
    ENTER(card_id, device_id);
    if (!vdev || !out) return ERR_INVALID_PARAMETER;
    if (!(chip = find(card_id, device_id))) return ERR_INVALID_DEVICE_ID;
    if (!chip->has_vnpu) return ERR_NOT_SUPPORT;
    int fd = lock_state();
    if (fd < 0) return ERR_FILE_OPERATE;
    int rc = load_vnpus();
    if (rc == DCMI_OK && (rc = create_on(chip, vdev, out)) == DCMI_OK && (rc = save_vnpus()) == DCMI_OK)
        node(out->vdev_id, 1);
    close(fd);
    return late(rc);
}

int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid)
{
    struct chip *chip;
    ENTER(card_id, device_id);
    if (!(chip = find(card_id, device_id))) return ERR_INVALID_DEVICE_ID;
    if (!chip->has_vnpu) return ERR_NOT_SUPPORT;
    int fd = lock_state();
    if (fd < 0) return ERR_FILE_OPERATE;
    int rc = load_vnpus();
    struct vnpu *v = rc == DCMI_OK ? vnpu_at(chip, vdevid) : NULL;
    if (rc == DCMI_OK && !v) rc = ERR_INVALID_PARAMETER;
    if (v) {
        *v = vnpus[--nvnpus];  /* the order of vnpus.json does not matter: listings sort by ID */
        if ((rc = save_vnpus()) == DCMI_OK) node(vdevid, 0);
    }
    close(fd);
    return late(rc);
}

static void fill_total(struct chip *chip, struct dcmi_soc_total_resource *total)
{
    unsigned int ids[MAX_VNPUS];
    unsigned int n = 0;
    memset(total, 0, sizeof *total);
    for (int i = 0; i < nvnpus; i++)
        if (on_chip(&vnpus[i], chip)) {
            ids[n++] = (unsigned int)vnpus[i].vnpu_id;
            if (vnpus[i].vgroup_id < 32) total->vfg_bitmap |= 1u << vnpus[i].vgroup_id;
        }
    for (unsigned int a = 0; a < n; a++)  /* ascending, as info-vnpu lists them */
        for (unsigned int b = a + 1; b < n; b++)
            if (ids[b] < ids[a]) { unsigned int x = ids[a]; ids[a] = ids[b]; ids[b] = x; }
    total->vdev_num = n < DCMI_SOC_SPLIT_MAX ? n : DCMI_SOC_SPLIT_MAX;
    memcpy(total->vdev_id, ids, total->vdev_num * sizeof ids[0]);
    total->vfg_num = (unsigned int)__builtin_popcount(total->vfg_bitmap);
    total->computing.aic = (float)chip->total[0];
    total->computing.memory_size = chip->total[1] > 0 ? (unsigned long long)chip->total[1] : 0;
}

static int fill_vdev(struct chip *chip, struct dcmi_vdev_query_stru *query)
{
    struct vnpu *v = vnpu_at(chip, query->vdev_id);
    if (!v) return ERR_INVALID_PARAMETER;
    struct vtemplate *t = template_of(chip, v->template_name);
    memset(&query->query_info, 0, sizeof query->query_info);
    size_t len = strnlen(v->template_name, DCMI_VDEV_RES_NAME_LEN - 1);  /* the header's name[16] */
    memcpy(query->query_info.name, v->template_name, len);
    query->query_info.vfg_id = (unsigned int)v->vgroup_id;
    query->query_info.base.vfg_id = (unsigned int)v->vgroup_id;
    if (t) {
        query->query_info.computing.aic = (float)t->need[0];
        query->query_info.computing.memory_size = (unsigned long long)t->need[1];
    }
    return DCMI_OK;
}

/* The VDEV_MNG queries behind `npu-smi info -t info-vnpu`: the chip's vNPU IDs (GET_TOTAL_RESOURCE,
 * struct dcmi_soc_total_resource) and one vNPU's template and group (GET_VDEV_RESOURCE, struct
 * dcmi_vdev_query_stru with vdev_id in). Every other command is "not supported" here. */
int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size)
{
    struct chip *chip;
    ENTER(card_id, device_id);
    if (!buf || !size) return ERR_INVALID_PARAMETER;
    if (!(chip = find(card_id, device_id))) return ERR_INVALID_DEVICE_ID;
    if (main_cmd != DCMI_MAIN_CMD_VDEV_MNG || !chip->has_vnpu) return ERR_NOT_SUPPORT;
    size_t need = sub_cmd == DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE ? sizeof(struct dcmi_soc_total_resource)
                : sub_cmd == DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE ? sizeof(struct dcmi_vdev_query_stru) : 0;
    if (!need) return ERR_NOT_SUPPORT;
    if (*size < need) return ERR_INVALID_PARAMETER;
    int fd = lock_state();
    if (fd < 0) return ERR_FILE_OPERATE;
    int rc = load_vnpus();
    if (rc == DCMI_OK && sub_cmd == DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE) fill_total(chip, buf);
    else if (rc == DCMI_OK) rc = fill_vdev(chip, buf);
    if (rc == DCMI_OK) *size = (unsigned int)need;
    close(fd);
    return late(rc);
}

/* `npu-smi info -t vnpu-cfg-recover`: 1 enabled (the vNPUs outlive a restart), 0 disabled. */
int dcmi_get_vnpu_config_recover_mode(unsigned int *mode)
{
    ENTER(-1, -1);
    if (!mode) return ERR_INVALID_PARAMETER;
    *mode = (unsigned int)recovers();
    return late(DCMI_OK);
}

#endif /* DCMI_SIM_MINIMAL */
