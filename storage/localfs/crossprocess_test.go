package localfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/graftworks/graft/storage"
)

// helperEnv, when set in the environment, turns the test binary into one
// racing child process of TestPut_RacingProcesses…; its value is the
// child's helperSpec as JSON.
const helperEnv = "GRAFT_LOCALFS_RACE_HELPER"

const (
	raceWinnerKey  = "race/refs/branches/main.json"
	raceCounterKey = "race/counter"
)

// helperSpec tells a child process what to do.
type helperSpec struct {
	Dir         string `json:"dir"`
	ID          int    `json:"id"`
	Increments  int    `json:"increments"`
	MaxAttempts int    `json:"max_attempts"`
}

// helperResult is what a child process reports on stdout.
type helperResult struct {
	WonCreate bool   `json:"won_create"`
	Retries   int    `json:"retries"`
	Err       string `json:"err,omitempty"`
}

// TestMain runs the child role when asked to, before any test: children
// run no tests, so none of them can pass vacuously.
func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runRaceHelper(spec))
	}
	os.Exit(m.Run())
}

// runRaceHelper is one child: it waits for the parent's go-ahead on stdin,
// races put-if-absent on raceWinnerKey, then adds Increments to the counter
// at raceCounterKey by compare-and-swap, retrying on precondition failure.
func runRaceHelper(specJSON string) int {
	var spec helperSpec
	var res helperResult
	report := func() int {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return 0
	}
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		res.Err = fmt.Sprintf("decode spec: %v", err)
		return report()
	}
	s, err := Open(spec.Dir)
	if err != nil {
		res.Err = err.Error()
		return report()
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		res.Err = fmt.Sprintf("wait for go-ahead: %v", err)
		return report()
	}
	ctx := context.Background()

	_, err = s.Put(ctx, raceWinnerKey, fmt.Appendf(nil, "process %d", spec.ID), storage.PutOptions{IfNoneMatch: true})
	switch {
	case err == nil:
		res.WonCreate = true
	case !errors.Is(err, storage.ErrPreconditionFailed):
		res.Err = fmt.Sprintf("put-if-absent: %v", err)
		return report()
	}

	for done, attempts := 0, 0; done < spec.Increments; attempts++ {
		if attempts >= spec.MaxAttempts {
			res.Err = fmt.Sprintf("gave up after %d attempts with %d of %d increments", attempts, done, spec.Increments)
			return report()
		}
		obj, err := s.Get(ctx, raceCounterKey)
		if err != nil {
			res.Err = fmt.Sprintf("get counter: %v", err)
			return report()
		}
		n, err := strconv.Atoi(string(obj.Body))
		if err != nil {
			res.Err = fmt.Sprintf("parse counter %q: %v", obj.Body, err)
			return report()
		}
		_, err = s.Put(ctx, raceCounterKey, []byte(strconv.Itoa(n+1)), storage.PutOptions{IfMatch: obj.ETag})
		switch {
		case err == nil:
			done++
		case errors.Is(err, storage.ErrPreconditionFailed):
			res.Retries++
		default:
			res.Err = fmt.Sprintf("compare-and-swap counter: %v", err)
			return report()
		}
	}
	return report()
}

func TestPut_RacingProcesses_OneCreatorAndNoLostCompareAndSwap(t *testing.T) {
	const processes, increments = 4, 25
	s, dir := openTemp(t)
	mustPut(t, s, raceCounterKey, "0", storage.PutOptions{IfNoneMatch: true})

	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout bytes.Buffer
		stderr bytes.Buffer
	}
	children := make([]*child, processes)
	for i := range children {
		spec, err := json.Marshal(helperSpec{Dir: dir, ID: i, Increments: increments, MaxAttempts: 100 * increments * processes})
		if err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")}
		c.cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", i, err)
		}
		children[i] = c
	}
	// Release every child at once, then wait for all, so that none is left
	// running whatever happens below.
	for _, c := range children {
		_, _ = io.WriteString(c.stdin, "go\n")
		_ = c.stdin.Close()
	}
	waitErrs := make([]error, processes)
	for i, c := range children {
		waitErrs[i] = c.cmd.Wait()
	}

	creators, retries := []int{}, 0
	for i, c := range children {
		if waitErrs[i] != nil {
			t.Fatalf("child %d: %v\nstderr:\n%s", i, waitErrs[i], c.stderr.String())
		}
		var res helperResult
		if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
			t.Fatalf("child %d stdout %q: %v\nstderr:\n%s", i, c.stdout.String(), err, c.stderr.String())
		}
		if res.Err != "" {
			t.Fatalf("child %d: %s", i, res.Err)
		}
		if res.WonCreate {
			creators = append(creators, i)
		}
		retries += res.Retries
	}
	t.Logf("%d processes × %d increments: %d compare-and-swap retries", processes, increments, retries)

	if len(creators) != 1 {
		t.Fatalf("processes that won put-if-absent = %v, want exactly one", creators)
	}
	obj, err := s.Get(t.Context(), raceWinnerKey)
	if err != nil {
		t.Fatalf("get %s: %v", raceWinnerKey, err)
	}
	if want := fmt.Sprintf("process %d", creators[0]); string(obj.Body) != want {
		t.Fatalf("%s holds %q, want the winner's %q", raceWinnerKey, obj.Body, want)
	}
	counter, err := s.Get(t.Context(), raceCounterKey)
	if err != nil {
		t.Fatalf("get counter: %v", err)
	}
	if want := strconv.Itoa(processes * increments); string(counter.Body) != want {
		t.Fatalf("counter = %s, want %s: a compare-and-swap update was lost", counter.Body, want)
	}
}
