// Package faults is Sluice's fault-injection suite for fleet mode,
// Jepsen-style but on the real parts: a 3-node nats-server cluster and
// three sluiced appliances (real processes, the Rust engine), random
// writes through the admin APIs with every outcome recorded, SIGKILL and
// SIGSTOP of NATS nodes (stream and meta leaders among them) and of
// appliances at random points, data-plane traffic throughout, and a
// checker that judges the recorded history. A seed fixes the schedule of
// writes and faults; the timing of real processes does not repeat
// exactly, so a failing seed reproduces the same sequence of operations.
package faults

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one child process that can be killed, stopped, continued and
// started again with the same arguments.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string // stdout+stderr, appended across restarts

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	exited  chan struct{}
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n==== %s start %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Children die with the suite, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	p.cmd, p.exited, p.stopped = cmd, exited, false
	return nil
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd, p.stopped = nil, false
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (p *proc) signal(sig syscall.Signal, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	p.stopped = stopped
}

func (p *proc) stop() { p.signal(syscall.SIGSTOP, true) }
func (p *proc) cont() { p.signal(syscall.SIGCONT, false) }

func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.stopped
}

// running: started, not killed, not stopped.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopped {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitedOnItsOwn reports a process that died without being killed.
func (p *proc) exitedOnItsOwn() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// freePorts returns n distinct free loopback TCP ports (and, for the data
// plane, UDP ports free too).
func freePorts(n int, udp bool) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if udp {
			u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue
			}
			u.Close()
		}
		out = append(out, port)
	}
	return out, nil
}
