/*
 * nvme-dataplane KVM test guest: a freestanding multiboot program that
 * drives QEMU's NVMe controller the way a driver does, small enough to run
 * under a KVM whose every instruction is emulated.
 *
 * It finds the controller on PCI bus 0, points MSI-X vector 1 at the local
 * APIC, enables the controller, optionally configures shadow doorbells
 * (Doorbell Buffer Config, ringing by the Linux EventIdx rule), creates one
 * I/O queue pair with interrupts on vector 1, then writes and reads back
 * NR_IOS blocks one at a time, waiting for each completion interrupt with
 * hlt.  Then it masks vector 1, completes one write while it is masked
 * (the pending bit must rise, no interrupt arrive), retargets the entry to
 * another IDT vector and unmasks it: the pending interrupt and the next one
 * must arrive at the new vector.
 * Lines starting with "NVDP " go to COM1; before and after the I/O
 * loop it prints a mark and waits for one byte on COM1, so that the host
 * can sample its counters at exactly those points.  It leaves through
 * isa-debug-exit (port 0xf4): 0 on success, 1 on failure.
 *
 * The kernel command line (multiboot) selects: "dbbuf" for shadow
 * doorbells, "ios=N" for the number of I/Os, "sync" to wait on the marks,
 * "nomask" to leave out the masking step.  A periodic LAPIC timer bounds
 * every wait for an interrupt: a lost one fails in seconds, with the step
 * it was lost in.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdint.h>
#include <stddef.h>

#define NVME_VENDOR     0x1b36
#define NVME_DEVICE     0x0010
#define IRQ_VECTOR      0x40
#define IRQ_VECTOR2     0x41    /* vector 1 retargeted while masked */
#define TIMER_VECTOR    0x42    /* LAPIC timer: bounds every wait */
#define TICK_NS         100000000u
#define WAIT_TICKS      50      /* a wait fails after 5 s */
#define LAPIC           0xfee00000u
#define QSIZE           16
#define PAGE            4096

static uint8_t asq[PAGE] __attribute__((aligned(PAGE)));
static uint8_t acq[PAGE] __attribute__((aligned(PAGE)));
static uint8_t iosq[PAGE] __attribute__((aligned(PAGE)));
static uint8_t iocq[PAGE] __attribute__((aligned(PAGE)));
static uint8_t dbs[PAGE] __attribute__((aligned(PAGE)));
static uint8_t eis[PAGE] __attribute__((aligned(PAGE)));
static uint8_t wbuf[PAGE] __attribute__((aligned(PAGE)));
static uint8_t rbuf[PAGE] __attribute__((aligned(PAGE)));
static uint8_t idbuf[PAGE] __attribute__((aligned(PAGE)));
static uint64_t idt[256];
static volatile uint32_t irqs, irqs2, ticks;
static const char *step = "setup";

extern void irq_stub(void);

static inline void outb(uint16_t port, uint8_t v)
{
    __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline uint8_t inb(uint16_t port)
{
    uint8_t v;
    __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

static inline void outl(uint16_t port, uint32_t v)
{
    __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port));
}

static inline uint32_t inl(uint16_t port)
{
    uint32_t v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

static inline uint32_t rd32(uintptr_t a)
{
    return *(volatile uint32_t *)a;
}

static inline void wr32(uintptr_t a, uint32_t v)
{
    *(volatile uint32_t *)a = v;
}

static void putc_com1(char c)
{
    while (!(inb(0x3fd) & 0x20)) {
    }
    outb(0x3f8, c);
}

static void puts_com1(const char *s)
{
    while (*s) {
        putc_com1(*s++);
    }
}

static void putu(uint32_t v)
{
    char b[11];
    int i = 10;

    b[i] = 0;
    do {
        b[--i] = '0' + v % 10;
        v /= 10;
    } while (v);
    puts_com1(b + i);
}

static void putx(uint32_t v)
{
    int i;

    puts_com1("0x");
    for (i = 28; i >= 0; i -= 4) {
        putc_com1("0123456789abcdef"[(v >> i) & 15]);
    }
}

static void __attribute__((noreturn)) finish(int failed)
{
    outb(0xf4, failed ? 1 : 0);
    for (;;) {
        __asm__ volatile("cli; hlt");
    }
}

static void __attribute__((noreturn)) fail(const char *what, uint32_t v)
{
    puts_com1("NVDP fail ");
    puts_com1(what);
    puts_com1(" ");
    putx(v);
    puts_com1("\n");
    finish(1);
}

/* the compiler may call these for struct copies and initialisers */
void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);

void *memset(void *d, int c, size_t n)
{
    uint8_t *p = d;

    while (n--) {
        *p++ = c;
    }
    return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
    uint8_t *p = d;
    const uint8_t *q = s;

    while (n--) {
        *p++ = *q++;
    }
    return d;
}

/* Wait for the host to take its sample: one byte on COM1. */
static void mark(const char *name, int sync)
{
    puts_com1("NVDP mark ");
    puts_com1(name);
    puts_com1("\n");
    if (sync) {
        while (!(inb(0x3fd) & 1)) {
        }
        (void)inb(0x3f8);
    }
}

void irq_handler(void);
void irq_handler(void)
{
    /* in-service register for vectors 0x40-0x5f */
    uint32_t isr = rd32(LAPIC + 0x120);

    if (isr & (1u << (TIMER_VECTOR - 0x40))) {
        ticks++;
    } else if (isr & (1u << (IRQ_VECTOR2 - 0x40))) {
        irqs2++;
    } else {
        irqs++;
    }
    wr32(LAPIC + 0xb0, 0);      /* EOI */
}

static uint32_t pci_cfg(int dev, int off)
{
    outl(0xcf8, 0x80000000u | (dev << 11) | (off & 0xfc));
    return inl(0xcfc);
}

static void pci_cfg_write(int dev, int off, uint32_t v)
{
    outl(0xcf8, 0x80000000u | (dev << 11) | (off & 0xfc));
    outl(0xcfc, v);
}

/* The controller */
static uintptr_t bar, msix_entry, msix_pba;
static uint32_t dstrd = 4;
static uint16_t cid;
static int use_dbbuf;

struct cmd {
    uint8_t opc, flags;
    uint16_t cid;
    uint32_t nsid;
    uint64_t rsvd, mptr, prp1, prp2;
    uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15;
};

struct cqe {
    uint32_t result, rsvd;
    uint16_t sqhd, sqid, cid, status;
};

struct queue {
    uint8_t *ring;
    uint16_t qid, tail, head, db;
    int phase;
};

static struct queue aq_s = { asq, 0, 0, 0, 0, 1 };
static struct queue aq_c = { acq, 0, 0, 0, 0, 1 };
static struct queue io_s = { iosq, 1, 0, 0, 0, 1 };
static struct queue io_c = { iocq, 1, 0, 0, 0, 1 };

static int need_event(uint16_t ei, uint16_t new_idx, uint16_t old)
{
    return (uint16_t)(new_idx - ei - 1) < (uint16_t)(new_idx - old);
}

static void ring(struct queue *q, int cq, uint16_t val)
{
    uintptr_t off = 0x1000 + (2 * q->qid + cq) * dstrd;
    uint16_t old = q->db;

    q->db = val;
    if (q->qid && use_dbbuf) {
        wr32((uintptr_t)dbs + (2 * q->qid + cq) * dstrd, val);
        /* full barrier: the shadow write before the EventIdx read */
        __asm__ volatile("lock; addl $0, (%%esp)" ::: "memory", "cc");
        if (!need_event(rd32((uintptr_t)eis + (2 * q->qid + cq) * dstrd),
                        val, old)) {
            return;
        }
    }
    wr32(bar + off, val);
}

static uint16_t submit(struct queue *sq, struct cmd *c)
{
    c->cid = ++cid;
    *(struct cmd *)(sq->ring + sq->tail * 64) = *c;
    sq->tail = (sq->tail + 1) % QSIZE;
    __asm__ volatile("" ::: "memory");
    ring(sq, 0, sq->tail);
    return c->cid;
}

static int cq_peek(struct queue *cq, struct cqe *e)
{
    volatile struct cqe *p = (volatile struct cqe *)(cq->ring + cq->head * 16);

    if ((p->status & 1) != cq->phase) {
        return 0;
    }
    *e = *(struct cqe *)p;
    cq->head = (cq->head + 1) % QSIZE;
    if (!cq->head) {
        cq->phase = !cq->phase;
    }
    return 1;
}

/* Admin commands are polled; the admin CQ's vector stays masked. */
static uint16_t admin(struct cmd *c)
{
    uint16_t id = submit(&aq_s, c);
    struct cqe e;
    uint32_t spins = 0;

    while (!cq_peek(&aq_c, &e)) {
        if (++spins > 100000000) {
            fail("admin-timeout", c->opc);
        }
    }
    ring(&aq_c, 1, aq_c.head);
    if (e.cid != id) {
        fail("admin-cid", e.cid);
    }
    return e.status >> 1;
}

static void find_nvme(void)
{
    int dev;

    for (dev = 0; dev < 32; dev++) {
        uint32_t id = pci_cfg(dev, 0);

        if ((id & 0xffff) == NVME_VENDOR && (id >> 16) == NVME_DEVICE) {
            uint32_t lo = pci_cfg(dev, 0x10), hi = pci_cfg(dev, 0x14);
            uint32_t cap_ptr, cap;

            if (hi || !(lo & ~0xfu)) {
                fail("bar0", hi);
            }
            bar = lo & ~0xfu;
            /* memory space + bus master */
            pci_cfg_write(dev, 0x04, pci_cfg(dev, 0x04) | 0x6);
            for (cap_ptr = pci_cfg(dev, 0x34) & 0xff; cap_ptr;
                 cap_ptr = (cap >> 8) & 0xff) {
                cap = pci_cfg(dev, cap_ptr);
                if ((cap & 0xff) == 0x11) {
                    uint32_t table = pci_cfg(dev, cap_ptr + 4);
                    uint32_t pba = pci_cfg(dev, cap_ptr + 8);

                    if ((table & 7) || (pba & 7)) {
                        fail("msix-bir", table);
                    }
                    msix_entry = bar + (table & ~7u) + 16 * 1;
                    msix_pba = bar + (pba & ~7u);
                    wr32(msix_entry + 0, LAPIC);    /* to APIC ID 0 */
                    wr32(msix_entry + 4, 0);
                    wr32(msix_entry + 8, IRQ_VECTOR);   /* fixed, edge */
                    wr32(msix_entry + 12, 0);           /* unmasked */
                    pci_cfg_write(dev, cap_ptr, cap | (1u << 31));
                    return;
                }
            }
            fail("no-msix", dev);
        }
    }
    fail("no-nvme", 0);
}

static void setup_cpu(void)
{
    uint64_t addr = (uintptr_t)irq_stub;
    struct {
        uint16_t limit;
        uint32_t base;
    } __attribute__((packed)) idtr = { sizeof(idt) - 1, (uintptr_t)idt };

    /* mask the 8259s: SeaBIOS leaves the timer unmasked */
    outb(0x21, 0xff);
    outb(0xa1, 0xff);
    idt[IRQ_VECTOR] = (addr & 0xffff) | (0x08ull << 16) |
                      (0x8e00ull << 32) | ((addr >> 16) << 48);
    idt[IRQ_VECTOR2] = idt[IRQ_VECTOR];
    idt[TIMER_VECTOR] = idt[IRQ_VECTOR];
    idt[0xff] = idt[IRQ_VECTOR];               /* spurious */
    __asm__ volatile("lidt %0" : : "m"(idtr));
    wr32(LAPIC + 0x80, 0);                     /* TPR */
    wr32(LAPIC + 0xf0, 0x1ff);                 /* enable, spurious 0xff */
    wr32(LAPIC + 0x3e0, 0x3);                  /* timer: divide by 16 */
    wr32(LAPIC + 0x320, (1u << 17) | TIMER_VECTOR); /* periodic */
    wr32(LAPIC + 0x380, TICK_NS / 16);         /* 1 GHz bus: 100 ms */
}

/* Called in every wait for an interrupt: fail once it took too long. */
static void check_wait(uint32_t since, uint32_t what)
{
    if (ticks - since > WAIT_TICKS) {
        puts_com1("NVDP timeout step=");
        puts_com1(step);
        puts_com1("\n");
        fail(step, what);
    }
}

static void enable_ctrl(void)
{
    uint64_t cap = rd32(bar) | ((uint64_t)rd32(bar + 4) << 32);
    uint32_t spins = 0;

    dstrd = 4u << ((cap >> 32) & 0xf);
    wr32(bar + 0x14, 0);
    while (rd32(bar + 0x1c) & 1) {
        if (++spins > 100000000) {
            fail("disable", rd32(bar + 0x1c));
        }
    }
    wr32(bar + 0x24, (QSIZE - 1) << 16 | (QSIZE - 1));
    wr32(bar + 0x28, (uintptr_t)asq);
    wr32(bar + 0x2c, 0);
    wr32(bar + 0x30, (uintptr_t)acq);
    wr32(bar + 0x34, 0);
    wr32(bar + 0x14, (4 << 20) | (6 << 16) | 1);
    spins = 0;
    while (!(rd32(bar + 0x1c) & 1)) {
        if (++spins > 100000000) {
            fail("enable", rd32(bar + 0x1c));
        }
    }
}

static int has_word(const char *s, const char *w, const char **val)
{
    while (s && *s) {
        const char *a = s, *b = w;

        while (*b && *a == *b) {
            a++;
            b++;
        }
        if (!*b && (*a == ' ' || *a == 0 || *a == '=')) {
            if (val) {
                *val = *a == '=' ? a + 1 : NULL;
            }
            return 1;
        }
        while (*s && *s != ' ') {
            s++;
        }
        while (*s == ' ') {
            s++;
        }
    }
    return 0;
}

static uint32_t atou(const char *s)
{
    uint32_t v = 0;

    while (s && *s >= '0' && *s <= '9') {
        v = v * 10 + (*s++ - '0');
    }
    return v;
}

/* One read or write of block @lba, waited for with hlt. */
static void io(uint8_t opc, uint32_t lba, uint8_t *buf, uint32_t nlb)
{
    struct cmd c;
    struct cqe e;
    uint32_t before = irqs + irqs2;
    uint32_t since = ticks;
    uint16_t id;

    memset(&c, 0, sizeof(c));
    c.opc = opc;
    c.nsid = 1;
    c.prp1 = (uintptr_t)buf;
    c.cdw10 = lba;
    c.cdw12 = nlb - 1;
    id = submit(&io_s, &c);
    for (;;) {
        __asm__ volatile("cli" ::: "memory");
        if (cq_peek(&io_c, &e)) {
            __asm__ volatile("sti" ::: "memory");
            break;
        }
        /* sti; hlt: no interrupt can slip in between the two */
        __asm__ volatile("sti; hlt" ::: "memory");
        check_wait(since, id);
    }
    ring(&io_c, 1, io_c.head);
    if (e.cid != id || (e.status >> 1)) {
        fail("io-status", e.status >> 1);
    }
    /*
     * The interrupt may come a little after the entry is visible: the
     * guest can see the entry while it is not halted, and with an iothread
     * the entry is posted there and the interrupt raised by the main loop.
     */
    since = ticks;
    for (;;) {
        __asm__ volatile("cli" ::: "memory");
        if (irqs + irqs2 != before) {
            __asm__ volatile("sti" ::: "memory");
            break;
        }
        __asm__ volatile("sti; hlt" ::: "memory");
        check_wait(since, id);
    }
}

/*
 * Mask vector 1, complete a write while it is masked (no interrupt, the
 * pending bit set), point the entry at IRQ_VECTOR2, unmask: the pending
 * interrupt arrives there, and so does the next completion's.
 */
static void mask_retarget(uint32_t lba, uint32_t nlb)
{
    struct cmd c;
    struct cqe e;
    uint32_t before = irqs, spins = 0, since;
    uint16_t id;

    step = "masked-io";
    wr32(msix_entry + 12, 1);
    memset(&c, 0, sizeof(c));
    c.opc = 0x01;
    c.nsid = 1;
    c.prp1 = (uintptr_t)wbuf;
    c.cdw10 = lba;
    c.cdw12 = nlb - 1;
    id = submit(&io_s, &c);
    since = ticks;
    while (!cq_peek(&io_c, &e)) {
        check_wait(since, id);
    }
    ring(&io_c, 1, io_c.head);
    if (e.cid != id || (e.status >> 1)) {
        fail("masked-io-status", e.status >> 1);
    }
    /* the device signals after it posts: wait for the pending bit */
    step = "masked-pending-bit";
    since = ticks;
    while (!(rd32(msix_pba) & 2)) {
        check_wait(since, rd32(msix_pba));
    }
    if (irqs != before || irqs2) {
        fail("masked-interrupt", irqs - before);
    }

    wr32(msix_entry + 8, IRQ_VECTOR2);
    wr32(msix_entry + 12, 0);
    step = "unmask-pending-interrupt";
    since = ticks;
    for (;;) {
        __asm__ volatile("cli" ::: "memory");
        if (irqs2) {
            __asm__ volatile("sti" ::: "memory");
            break;
        }
        __asm__ volatile("sti; hlt" ::: "memory");
        check_wait(since, rd32(msix_pba));
    }
    step = "retargeted-io";
    if (rd32(msix_pba) & 2) {
        fail("pending-after-unmask", rd32(msix_pba));
    }
    memset(rbuf, 0, PAGE);
    io(0x02, lba, rbuf, nlb);
    if (irqs2 != 2 || irqs != before) {
        fail("retarget", irqs2);
    }
    for (spins = 0; spins < PAGE; spins++) {
        if (rbuf[spins] != wbuf[spins]) {
            fail("masked-data", spins);
        }
    }
}

struct mb_info {
    uint32_t flags, mem_lower, mem_upper, boot_device, cmdline;
};

void guest_main(uint32_t magic, struct mb_info *mbi);
void guest_main(uint32_t magic, struct mb_info *mbi)
{
    const char *cmdline = NULL, *v;
    uint32_t nr_ios = 64, lba_size, i, j, nlb;
    int sync, nomask;
    struct cmd c;

    if (magic == 0x2badb002 && mbi && (mbi->flags & 4)) {
        cmdline = (const char *)(uintptr_t)mbi->cmdline;
    }
    use_dbbuf = has_word(cmdline, "dbbuf", NULL);
    sync = has_word(cmdline, "sync", NULL);
    nomask = has_word(cmdline, "nomask", NULL);
    if (has_word(cmdline, "ios", &v) && v) {
        nr_ios = atou(v);
    }

    puts_com1("NVDP start");
    puts_com1(use_dbbuf ? " dbbuf" : "");
    puts_com1("\n");
    setup_cpu();
    find_nvme();
    enable_ctrl();

    /* Identify Namespace 1: LBA size */
    memset(&c, 0, sizeof(c));
    c.opc = 0x06;
    c.nsid = 1;
    c.prp1 = (uintptr_t)idbuf;
    c.cdw10 = 0;
    if (admin(&c)) {
        fail("identify", 0);
    }
    lba_size = 1u << idbuf[128 + 4 * (idbuf[26] & 0xf) + 2];
    nlb = PAGE / lba_size;

    if (use_dbbuf) {
        memset(&c, 0, sizeof(c));
        c.opc = 0x7c;
        c.prp1 = (uintptr_t)dbs;
        c.prp2 = (uintptr_t)eis;
        if (admin(&c)) {
            fail("dbbuf-config", 0);
        }
    }

    memset(&c, 0, sizeof(c));
    c.opc = 0x05;                               /* Create I/O CQ */
    c.prp1 = (uintptr_t)iocq;
    c.cdw10 = (QSIZE - 1) << 16 | 1;
    c.cdw11 = 1 << 16 | 2 | 1;                  /* vector 1, IEN, PC */
    if (admin(&c)) {
        fail("create-cq", 0);
    }
    memset(&c, 0, sizeof(c));
    c.opc = 0x01;                               /* Create I/O SQ */
    c.prp1 = (uintptr_t)iosq;
    c.cdw10 = (QSIZE - 1) << 16 | 1;
    c.cdw11 = 1 << 16 | 1;                      /* CQ 1, PC */
    if (admin(&c)) {
        fail("create-sq", 0);
    }

    __asm__ volatile("sti");
    mark("start", sync);
    step = "io-loop";
    for (i = 0; i < nr_ios / 2; i++) {
        for (j = 0; j < PAGE; j++) {
            wbuf[j] = (uint8_t)(i * 7 + j * 13 + (j >> 8));
        }
        io(0x01, i * nlb, wbuf, nlb);
        memset(rbuf, 0, PAGE);
        io(0x02, i * nlb, rbuf, nlb);
        for (j = 0; j < PAGE; j++) {
            if (rbuf[j] != wbuf[j]) {
                fail("data", i);
            }
        }
    }
    mark("end", sync);
    if (!nomask) {
        mask_retarget(i * nlb, nlb);
    }
    puts_com1("NVDP ok ios=");
    putu(nr_ios / 2 * 2);
    puts_com1(" irqs=");
    putu(irqs);
    puts_com1(" retargeted=");
    putu(irqs2);
    puts_com1("\n");
    finish(0);
}
