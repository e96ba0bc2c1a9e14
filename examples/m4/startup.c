/* startup.c - bare-metal support for examples/embedded.c on qemu's
   mps2-an386 (Cortex-M4 with FPU; memory map in mps2_an386.ld).

   The vector table, a reset handler (FPU on, .data copied from flash, .bss
   cleared, the stack painted so its high-water mark can be read), SysTick
   as the clock, and the few newlib system calls the example reaches, done
   with Arm semihosting: output to the host's stdout, and SYS_EXIT_EXTENDED so
   qemu exits with main's status. The heap is a small static pool for
   newlib's stdio, which allocates its FILE structs on first use (without one
   it writes through a NULL FILE); the library allocates nothing. */
#include <stdint.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>

int main(int argc, char **argv);

extern uint32_t m4_data_start, m4_data_end, m4_data_load, m4_bss_start, m4_bss_end;
extern uint32_t m4_stack_bottom, m4_stack_top;

#define M4_REG(a) (*(volatile uint32_t *)(a))
#define M4_STACK_PAINT 0x5ca1ab1eu

/* one semihosting call: r0 the operation, r1 its argument block */
static int m4_semihost(int op, void *arg) {
    register int r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void m4_exit(int status) {
    uint32_t block[2];
    block[0] = 0x20026;   /* ADP_Stopped_ApplicationExit */
    block[1] = (uint32_t)status;
    m4_semihost(0x20, block);   /* SYS_EXIT_EXTENDED: qemu exits with `status` */
    for (;;) { }
}

/* ---- the clock: SysTick on the core clock (25 MHz on this board), its
   24-bit count extended by the wrap interrupt. Under qemu's -icount shift=0
   one tick is 40 instructions; without -icount it follows host time. */
static volatile uint32_t m4_wraps;

static void m4_systick(void) { m4_wraps++; }

unsigned long long m4_ticks(void) {
    uint32_t w, v;
    do { w = m4_wraps; v = M4_REG(0xE000E018); } while (w != m4_wraps);   /* SYST_CVR counts down */
    return ((unsigned long long)w << 24) + (0xFFFFFFu - (v & 0xFFFFFFu));
}

/* bytes of stack ever used: the painted words the program has overwritten */
unsigned long m4_stack_used(void) {
    const uint32_t *p = &m4_stack_bottom;
    while (p < &m4_stack_top && *p == M4_STACK_PAINT) p++;
    return (unsigned long)((const char *)&m4_stack_top - (const char *)p);
}

static void m4_fault(void) {
    static const char msg[] = "fault: the Cortex-M4 took an exception\n";
    m4_semihost(0x04, (void *)msg);   /* SYS_WRITE0 */
    m4_exit(3);
}

void m4_reset(void) {
    uint32_t *d = &m4_data_start;
    const uint32_t *s = &m4_data_load;
    uint32_t *sp;
    int rc;
    static char *argv[] = { "embedded", NULL };
    static char outbuf[256];
    M4_REG(0xE000ED88) |= 0xFu << 20;   /* CPACR: CP10 and CP11 full access, before any FPU instruction */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    while (d < &m4_data_end) *d++ = *s++;
    for (d = &m4_bss_start; d < &m4_bss_end; d++) *d = 0;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (d = &m4_stack_bottom; d < sp - 16; d++) *d = M4_STACK_PAINT;   /* below this frame */
    M4_REG(0xE000E014) = 0xFFFFFF;   /* SYST_RVR */
    M4_REG(0xE000E018) = 0;          /* SYST_CVR */
    M4_REG(0xE000E010) = 7;          /* SYST_CSR: enable, interrupt, core clock */
    setvbuf(stdout, outbuf, _IOLBF, sizeof outbuf);   /* no semihosting call per character */
    rc = main(1, argv);
    fflush(stdout);
    m4_exit(rc);
}

/* the core's 16 exception vectors: the initial stack pointer, then handlers */
__attribute__((section(".vectors"), used)) static const uintptr_t m4_vectors[16] = {
    (uintptr_t)&m4_stack_top, (uintptr_t)m4_reset,
    (uintptr_t)m4_fault, (uintptr_t)m4_fault, (uintptr_t)m4_fault, (uintptr_t)m4_fault, (uintptr_t)m4_fault,   /* NMI .. UsageFault */
    0, 0, 0, 0,
    (uintptr_t)m4_fault, (uintptr_t)m4_fault, 0, (uintptr_t)m4_fault,   /* SVCall, DebugMon, -, PendSV */
    (uintptr_t)m4_systick
};

/* ---- newlib system calls (the rest come from nosys and fail) */
int _write(int fd, const char *buf, int len);
void *_sbrk(ptrdiff_t incr);
void _exit(int status);

int _write(int fd, const char *buf, int len) {
    static int tt = -1;
    uint32_t block[3];
    if (fd != 1 && fd != 2) { errno = EBADF; return -1; }
    if (tt < 0) {   /* the host console: SYS_OPEN of ":tt" for writing */
        block[0] = (uint32_t)(uintptr_t)":tt";
        block[1] = 4;   /* mode "w" */
        block[2] = 3;   /* strlen(":tt") */
        if ((tt = m4_semihost(0x01, block)) < 0) { errno = EIO; return -1; }
    }
    block[0] = (uint32_t)tt;
    block[1] = (uint32_t)(uintptr_t)buf;
    block[2] = (uint32_t)len;
    return len - m4_semihost(0x05, block);   /* SYS_WRITE returns the bytes not written */
}

static char m4_heap[2048] __attribute__((aligned(8)));
static size_t m4_heap_top;

void *_sbrk(ptrdiff_t incr) {
    char *p = m4_heap + m4_heap_top;
    if (incr < 0 || (size_t)incr > sizeof m4_heap - m4_heap_top) { errno = ENOMEM; return (void *)-1; }
    m4_heap_top += (size_t)incr;
    return p;
}

/* bytes of the pool newlib has taken */
unsigned long m4_heap_used(void) { return (unsigned long)m4_heap_top; }

void _exit(int status) { m4_exit(status); }
