package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/internal/testenv"
)

// The keep-alive tests run on the real Temporal dev server: only the server enforces
// heartbeat timeouts.

func TestMain(m *testing.M) { testenv.Main(m) }

// slowStep sleeps three heartbeat timeouts, after recording a heartbeat of its own when
// asked, and returns its attempt.
func slowStep(ctx context.Context, beatOnce bool) (int32, error) {
	if beatOnce {
		activity.RecordHeartbeat(ctx, "progress")
	}
	select {
	case <-time.After(3 * activity.GetInfo(ctx).HeartbeatTimeout):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return activity.GetInfo(ctx).Attempt, nil
}

// runSlowStep runs slowStep once, with no retry, as an ordinary activity with a one-second
// heartbeat timeout.
func runSlowStep(ctx workflow.Context, beatOnce bool) (int32, error) {
	o := workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}}
	var attempt int32
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), slowStep, beatOnce).Get(ctx, &attempt)
	return attempt, err
}

// runOn runs runSlowStep on a worker with the given interceptors.
func runOn(t *testing.T, interceptors []interceptor.WorkerInterceptor, beatOnce bool) (int32, error) {
	t.Helper()
	ts := testenv.Temporal(t)
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	queue := fmt.Sprintf("graft-keepalive-%d", time.Now().UnixNano())
	w := sdkworker.New(tc, queue, sdkworker.Options{Interceptors: interceptors})
	w.RegisterWorkflow(runSlowStep)
	w.RegisterActivity(slowStep)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{TaskQueue: queue}, runSlowStep, beatOnce)
	if err != nil {
		t.Fatal(err)
	}
	var attempt int32
	err = run.Get(ctx, &attempt)
	return attempt, err
}

// heartbeatTimedOut reports whether err is an activity's heartbeat timeout, with the
// details of its last heartbeat.
func heartbeatTimedOut(err error) (bool, string) {
	var te *temporal.TimeoutError
	if !errors.As(err, &te) || te.TimeoutType() != enumspb.TIMEOUT_TYPE_HEARTBEAT {
		return false, ""
	}
	var details string
	if te.HasLastHeartbeatDetails() {
		_ = te.LastHeartbeatDetails(&details)
	}
	return true, details
}

func TestKeepAlive_AStepLongerThanItsHeartbeatTimeout_EndsOnItsFirstAttempt(t *testing.T) {
	// Without the keep-alive, the server times the same step out: the test can fail.
	if _, err := runOn(t, nil, false); err == nil {
		t.Fatal("a silent step ran three heartbeat timeouts without the keep-alive; want a heartbeat timeout")
	} else if timedOut, _ := heartbeatTimedOut(err); !timedOut {
		t.Fatalf("a silent step without the keep-alive: %v; want a heartbeat timeout", err)
	}
	attempt, err := runOn(t, []interceptor.WorkerInterceptor{&keepAlive{}}, false)
	if err != nil || attempt != 1 {
		t.Fatalf("a silent step with the keep-alive: attempt %d, %v; want it done on attempt 1", attempt, err)
	}
}

func TestKeepAlive_AStepThatBeatsItself_KeepsItsDetailsAndItsSilenceTimesItOut(t *testing.T) {
	_, err := runOn(t, []interceptor.WorkerInterceptor{&keepAlive{}}, true)
	timedOut, details := heartbeatTimedOut(err)
	if !timedOut || details != "progress" {
		t.Fatalf("a step silent after its own heartbeat: %v (heartbeat timeout %v, last details %q); want a heartbeat timeout with its details %q",
			err, timedOut, details, "progress")
	}
}
