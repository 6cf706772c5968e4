package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// keepAlive heartbeats every activity scheduled with a heartbeat timeout while this worker
// runs it, so that the Temporal server hands the activity of a worker that died to another
// worker after that timeout, instead of after the whole start-to-close timeout. A step
// held by a slow store keeps beating: only the worker's death stops the heartbeats.
// An activity that records heartbeats of its own (cleanup's mark and sweep, with their
// progress) takes over from its first one: its silence then means what it always meant.
type keepAlive struct {
	interceptor.WorkerInterceptorBase
}

func (*keepAlive) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	k := &keepAliveActivity{}
	k.Next = next
	return k
}

// keepAliveActivity is keepAlive for one activity execution.
type keepAliveActivity struct {
	interceptor.ActivityInboundInterceptorBase
	outbound interceptor.ActivityOutboundInterceptor
	own      atomic.Bool // the activity recorded a heartbeat itself
}

func (k *keepAliveActivity) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	k.outbound = outbound
	return k.Next.Init(&ownHeartbeats{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, own: &k.own})
}

func (k *keepAliveActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	every := info.HeartbeatTimeout / 3
	if info.IsLocalActivity || every <= 0 {
		return k.Next.ExecuteActivity(ctx, in)
	}
	done := make(chan struct{})
	var beating sync.WaitGroup
	beating.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if k.own.Load() {
					return
				}
				k.outbound.RecordHeartbeat(ctx)
			}
		}
	})
	defer beating.Wait() // no heartbeat after the activity's answer
	defer close(done)
	return k.Next.ExecuteActivity(ctx, in)
}

// ownHeartbeats notes that the activity records heartbeats itself.
type ownHeartbeats struct {
	interceptor.ActivityOutboundInterceptorBase
	own *atomic.Bool
}

func (o *ownHeartbeats) RecordHeartbeat(ctx context.Context, details ...any) {
	o.own.Store(true)
	o.Next.RecordHeartbeat(ctx, details...)
}
