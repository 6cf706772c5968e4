// Package devstack starts and stops the servers graft runs beside it on a
// developer machine and in tests: the Temporal CLI's dev server, the versitygw
// and MinIO S3 servers and graft-worker processes; StartProcess starts any other
// (the production-shape tier's Temporal server). Each is a separate process (the
// servers built by internal/tools), bound to 127.0.0.1 on free ports. Every
// Start has a Stop that ends the whole process group, so nothing outlives the
// test or the `graft dev` run that began it.
package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is a running server process.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
	// logFile is where the output went, when not to log.
	logFile string

	stopOnce sync.Once
	waitErr  error
}

// StartProcess runs path with args and env in its own process group, in dir
// ("" for the current directory), and waits up to ready for probe to pass; a
// process that does not is stopped. Output goes to logFile when set, else to an
// in-memory buffer reported on failure.
func StartProcess(ctx context.Context, name, path string, args, env []string, logFile, dir string,
	ready time.Duration, probe func(context.Context) error) (*Process, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), log: &lockedBuffer{}, logFile: logFile}
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", name, err)
		}
		cmd.Stdout, cmd.Stderr = f, f
		defer f.Close()
	} else {
		cmd.Stdout, cmd.Stderr = p.log, p.log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, ready, probe); err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}

// retryPorts calls start up to three times while it fails and retry allows: a free
// port can be taken between FreePort and the server's bind. first tells the first call.
func retryPorts[T any](retry bool, start func(first bool) (T, error)) (t T, err error) {
	for i := range 3 {
		if t, err = start(i == 0); err == nil || !retry {
			break
		}
	}
	return t, err
}

// Output returns what the process printed: the in-memory buffer, or about the last
// 4 KiB of its log file from a line's start, so a failure to start reports why (a
// taken port, a schema error) even when the file goes with the run's temp directory.
func (p *Process) Output() string {
	if p.logFile == "" {
		return p.log.String()
	}
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return ""
	}
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return "last lines of " + p.logFile + ":\n" + string(b)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process group: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) { p.end(syscall.SIGTERM, grace) }

// Kill ends the process group at once with SIGKILL, as a crash or an OOM
// kill would, and waits for the process to be gone.
func (p *Process) Kill() { p.end(syscall.SIGKILL, 0) }

func (p *Process) end(sig syscall.Signal, grace time.Duration) {
	p.stopOnce.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, sig)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// Wait waits for the process to end, up to timeout, and returns how it
// ended (nil for exit status 0).
func (p *Process) Wait(timeout time.Duration) error {
	if p.Exited() {
		return p.waitErr
	}
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %s", p.Name, timeout)
	}
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// waitReady polls probe until it succeeds, the process exits, or timeout.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready: %v\n%s", p.Name, p.waitErr, p.Output())
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w\n%s", p.Name, timeout, errors.Join(ctx.Err(), last), p.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort returns a free TCP port on 127.0.0.1 that the kernel will not hand to another
// bind(:0) for a while: closing the accepted side of a connection to it first leaves it
// in TIME_WAIT (60 s on Linux). A server told the port can still bind it (Go sets
// SO_REUSEADDR), but the ephemeral ports the Temporal dev server's own services pick
// cannot collide with it, as one did, making a start exit before it was ready.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	c, err := net.DialTCP("tcp", nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return 0, fmt.Errorf("reserve port %d: %w", port, err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		return 0, fmt.Errorf("reserve port %d: %w", port, err)
	}
	s.Close() // the server side closes first: TIME_WAIT is on the port
	return port, nil
}

// get GETs url and closes the answer's body.
func get(ctx context.Context, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep the tail bounded
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
