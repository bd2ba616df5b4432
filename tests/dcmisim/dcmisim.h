/*
 * What the two halves of the test libdcmi.so share (libdcmi.c: host.json, faults, the chip calls;
 * vnpu.c: the vNPU calls): DCMI's return codes as dcmi_interface_api.h defines them, the chips read
 * from host.json, the JSON reader, and the fault hooks. Nothing here is exported from the library.
 */
#ifndef DCMISIM_H
#define DCMISIM_H

#include <stddef.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* dcmi_interface_api.h: DCMI_ERROR_CODE_BASE (-8000) minus n. */
#define DCMI_OK 0
#define ERR_INVALID_PARAMETER (-8001)
#define ERR_INVALID_DEVICE_ID (-8007)
#define ERR_NOT_READY (-8012)
#define ERR_FILE_OPERATE (-8014)
#define ERR_RESOURCE_OCCUPIED (-8020)
#define ERR_NOT_SUPPORT (-8255)

#define MAX_CHIP_NAME_LEN 32
#define DIE_ID_COUNT 5
#define MAX_CHIPS 128
#define TEXT 64

/* A vNPU resource: AI cores, memory (MiB), AICPUs, then the DVPP engines in the order of the
 * template catalogue (ascend_dra/profiles/ascend/hardvnpu/templates.py ENGINES): vpc, venc, jpegd,
 * pngd, vdec, jpege. host.json's "vnpu" object gives them per chip (npusmi_sim.chip_facts). */
#define NRES 9
#define MAX_TEMPLATES 16

struct vtemplate {
    char name[32];
    long long need[NRES];  /* 0 where the catalogue does not say */
};

struct chip {
    long long npu_id, chip_id, logic_id, physical_id, health, memory_mib, aicore, util, used_mib, temp, power_dw;
    int has_health, has_memory, has_aicore, has_util, has_die, has_bus, has_pci, has_used, has_temp, has_power;
    char model[TEXT], bus_id[TEXT], memory_kind[8], health_name[16];
    unsigned int die[DIE_ID_COUNT], pci_device_id;
    /* vNPUs: none unless has_vnpu (a model without templates: the calls say "not supported") */
    int has_vnpu, ntemplates;
    long long id_slots, max_vnpus;  /* max_vnpus -1: only the ID slots bound it */
    long long total[NRES];          /* -1 where the catalogue does not say (no limit) */
    struct vtemplate templates[MAX_TEMPLATES];
};

/* host.json's keys for the vNPU state the npu-smi simulator keeps. */
struct host_state {
    char boot_id_file[4096], dev_dir[4096];
    int recover;  /* vnpu_cfg_recover (true unless host.json says false) */
};

struct cursor { const char *s; };

extern HIDDEN struct chip chips[MAX_CHIPS];
extern HIDDEN int nchips;
extern HIDDEN struct host_state host;
extern HIDDEN int initialised;

HIDDEN void ws(struct cursor *c);
HIDDEN int string(struct cursor *c, char *out, size_t n);
HIDDEN int skip(struct cursor *c);
HIDDEN int number(struct cursor *c, long long *out);
HIDDEN int text(struct cursor *c, char *out, size_t n);
HIDDEN int load_host(void);
HIDDEN struct chip *find(int card, int device);
/* The action of the fault file's first line for this call and card/device, or 0 (libdcmi.c). */
HIDDEN int fault(const char *function, int card, int device);
/* rc, or what a "...-after" fault of this call says once its work is done. */
HIDDEN int late(int rc);
/* host.json's per-chip "vnpu" object (vnpu.c). */
HIDDEN int vnpu_facts(struct cursor *c, struct chip *chip);

#define ENTER(card, device)                                   \
    do {                                                      \
        int rc_ = fault(__func__, (card), (device));          \
        if (rc_) return rc_;                                  \
        if (!initialised) return ERR_NOT_READY;               \
        if ((rc_ = load_host())) return rc_;                  \
    } while (0)

#endif
