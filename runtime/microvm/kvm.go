package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The KVM ioctls the probe uses (x86-64), from linux/kvm.h.
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	kvmExitIO  = 2
	kvmExitHlt = 5
)

// probeCode is the test guest, 64-bit code at probeEntry: it writes 'S'
// to the serial port and halts.
var probeCode = []byte{
	0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
	0xb0, 'S', //             mov al, 'S'
	0xee, //                  out dx, al
	0xf4, //                  hlt
}

// The test guest's memory: 2 MiB, identity-mapped by one large page
// (page tables at probePML4 and the two pages after it).
const (
	probeEntry = 0x1000
	probePML4  = 0x2000
	probeMem   = 2 << 20
)

// probeKVM runs a tiny guest on /dev/kvm, in 64-bit mode with paging as a
// Linux guest runs, and says why KVM cannot run guests here, or nil when
// it can. A /dev/kvm that opens is not enough: on some hosts (nested
// virtualisation without what long mode needs) QEMU starts with KVM, the
// guest's real-mode setup code runs, and the kernel proper never prints a
// line, which looks from outside like a guest that hangs at boot. The
// probe gives up after timeout.
func probeKVM(timeout time.Duration) error {
	kvm, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer kvm.Close()
	type result struct{ err error }
	done := make(chan result, 1)
	tid := make(chan int, 1)
	go func() {
		// The vCPU belongs to this thread, and a stuck KVM_RUN is woken
		// with a signal sent to it.
		goruntime.LockOSThread()
		tid <- unix.Gettid()
		done <- result{runProbe(kvm.Fd())}
	}()
	thread := <-tid
	select {
	case r := <-done:
		return r.err
	case <-time.After(timeout):
	}
	// Wake the stuck KVM_RUN until the probe gives up. SIGURG is the Go
	// runtime's own preemption signal: harmless to the process, and it
	// makes the ioctl return EINTR.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = unix.Tgkill(os.Getpid(), thread, unix.SIGURG)
		select {
		case r := <-done:
			if r.err == nil {
				return nil
			}
			return fmt.Errorf("no answer within %s: %w", timeout, r.err)
		case <-tick.C:
		}
	}
}

func ioctl(fd uintptr, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

type kvmRegion struct {
	slot, flags                    uint32
	guestPhys, size, userspaceAddr uint64
}

type kvmSegment struct {
	base                                          uint64
	limit                                         uint32
	selector                                      uint16
	typ, present, dpl, db, s, l, g, avl, unusable uint8
	_                                             uint8
}

type kvmSregs struct {
	cs, ds, es, fs, gs, ss, tr, ldt kvmSegment
	gdt, idt                        [16]byte
	cr0, cr2, cr3, cr4, cr8, efer   uint64
	apicBase                        uint64
	interruptBitmap                 [4]uint64
}

type kvmRegs struct {
	gp          [16]uint64
	rip, rflags uint64
}

func runProbe(kvm uintptr) error {
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM API version %d: %v", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("create a VM: %w", err)
	}
	defer unix.Close(int(vmfd))
	mem, err := unix.Mmap(-1, 0, probeMem, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	copy(mem[probeEntry:], probeCode)
	// PML4[0] -> PDPT, PDPT[0] -> PD, PD[0] = the first 2 MiB, present,
	// writable, large.
	le := func(at int, v uint64) { *(*uint64)(unsafe.Pointer(&mem[at])) = v }
	le(probePML4, probePML4+0x1000|3)
	le(probePML4+0x1000, probePML4+0x2000|3)
	le(probePML4+0x2000, 0x83)
	region := kvmRegion{size: probeMem, userspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vmfd, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("set the guest's memory: %w", err)
	}
	vcpu, err := ioctl(vmfd, kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("create a vCPU: %w", err)
	}
	defer unix.Close(int(vcpu))
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return err
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(run)
	var sregs kvmSregs
	if _, err := ioctl(vcpu, kvmGetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return err
	}
	// Long mode with paging: CR0 PE|MP|ET|NE|WP|AM|PG, CR4 PAE, EFER
	// LME|LMA, a 64-bit code segment and flat data segments.
	sregs.cr3, sregs.cr4, sregs.cr0, sregs.efer = probePML4, 1<<5, 0x80050033, 0x500
	code := kvmSegment{limit: 0xffffffff, selector: 8, typ: 11, present: 1, s: 1, l: 1, g: 1}
	data := kvmSegment{limit: 0xffffffff, selector: 16, typ: 3, present: 1, s: 1, db: 1, g: 1}
	sregs.cs = code
	sregs.ds, sregs.es, sregs.fs, sregs.gs, sregs.ss = data, data, data, data, data
	if _, err := ioctl(vcpu, kvmSetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return fmt.Errorf("enter long mode: %w", err)
	}
	regs := kvmRegs{rip: probeEntry, rflags: 2}
	regs.gp[4] = probeMem // rsp
	if _, err := ioctl(vcpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return err
	}
	sawOut := false
	for range 4 {
		if _, err := ioctl(vcpu, kvmRun, 0); err != nil {
			if errors.Is(err, unix.EINTR) {
				return errors.New("the vCPU ran no instruction before the probe gave up")
			}
			return fmt.Errorf("run the vCPU: %w", err)
		}
		// struct kvm_run: exit_reason at 8; for KVM_EXIT_IO, the port at
		// 34 and the data at run+data_offset (40).
		switch reason := *(*uint32)(unsafe.Pointer(&run[8])); reason {
		case kvmExitIO:
			port := *(*uint16)(unsafe.Pointer(&run[34]))
			off := *(*uint64)(unsafe.Pointer(&run[40]))
			sawOut = port == 0x3f8 && off < uint64(len(run)) && run[off] == 'S'
		case kvmExitHlt:
			if !sawOut {
				return errors.New("the test guest halted without writing to its serial port")
			}
			return nil
		default:
			return fmt.Errorf("the test guest exited with KVM exit reason %d", reason)
		}
	}
	return errors.New("the test guest did not halt")
}

// bootMarker is what a Linux kernel prints first on an early console.
const bootMarker = "Linux version"

// probeBoot boots kernel under QEMU with KVM until it prints its first line
// on an early serial console, and says why it did not within timeout. It
// is the probe that catches hosts whose KVM runs a test guest but not a
// Linux kernel.
func probeBoot(ctx context.Context, qemu, kernel string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-machine", "pc,accel=kvm", "-m", "128", "-nodefaults", "-no-user-config",
		"-display", "none", "-no-reboot", "-kernel", kernel, "-append", "console=ttyS0 earlyprintk=ttyS0 panic=-1",
		"-chardev", "stdio,id=probe,signal=off", "-serial", "chardev:probe")
	// The probe's guest dies with this process: one left behind by a
	// stasisd killed while it probed runs on, on a KVM that cannot boot a
	// guest spinning a core (twenty such, from the tests' stasisd, loaded a
	// 2-core CI host to 84).
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	seen := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), bootMarker) {
				seen <- true
				return
			}
		}
		seen <- false
	}()
	select {
	case ok := <-seen:
		if ok {
			return nil
		}
		return fmt.Errorf("QEMU ended before the kernel printed a line: %s", strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		return fmt.Errorf("the kernel %s printed nothing within %s of boot under KVM", kernel, timeout)
	}
}
