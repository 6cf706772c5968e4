package devstack

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartTemporal_PreferredPortTaken_StartsOnAFreePort: a preferred frontend
// port that something else holds (graft dev's default 7233 taken between its
// check and the start) does not fail the start; the server comes up on a free
// port.
func TestStartTemporal_PreferredPortTaken_StartsOnAFreePort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	taken := takenPort(t)
	logFile := filepath.Join(t.TempDir(), "temporal.log")
	ts, err := StartTemporal(ctx, TemporalOptions{Headless: true, PreferredPort: taken, LogFile: logFile})
	if err != nil {
		t.Fatalf("start with preferred port %d taken: %v", taken, err)
	}
	defer ts.Stop(10 * time.Second)
	if ts.HostPort == hostPort(taken) {
		t.Fatalf("started at %s, want a port other than the taken %d", ts.HostPort, taken)
	}
}

// TestStartTemporal_InsistedPortTaken_FailsWithTheLogsTail: a port the caller
// insists on is not replaced, and the error carries the end of the server's log
// (why it exited), not only the log file's name.
func TestStartTemporal_InsistedPortTaken_FailsWithTheLogsTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	taken := takenPort(t)
	logFile := filepath.Join(t.TempDir(), "temporal.log")
	ts, err := StartTemporal(ctx, TemporalOptions{Headless: true, Port: taken, LogFile: logFile})
	if err == nil {
		ts.Stop(10 * time.Second)
		t.Fatalf("started at %s on a taken port", ts.HostPort)
	}
	logged, rerr := os.ReadFile(logFile)
	if rerr != nil || len(logged) == 0 {
		t.Fatalf("log %s: %v, %d bytes", logFile, rerr, len(logged))
	}
	if !strings.Contains(err.Error(), "last lines of "+logFile) {
		t.Fatalf("error %q does not carry the log's tail", err)
	}
}

// takenPort listens on a free port for the rest of the test and returns it.
func takenPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestFreePort_NotHandedOutAgainByTheKernel: a port FreePort returned is not
// what a later bind to port 0 gets, even 20,000 binds later (it sits in
// TIME_WAIT; without that reservation about nine runs in ten see it handed out
// again), yet a server told the port can still listen on it.
func TestFreePort_NotHandedOutAgainByTheKernel(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for range 20000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if got == port {
			t.Fatalf("bind(:0) handed out %d, which FreePort had just returned", port)
		}
	}
	l, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		t.Fatalf("listen on the reserved port %d: %v", port, err)
	}
	l.Close()
}
