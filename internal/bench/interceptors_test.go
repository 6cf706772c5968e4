package bench

import "go.temporal.io/sdk/interceptor"

// benchInterceptors are the bench worker's interceptors (none by default).
var benchInterceptors []interceptor.WorkerInterceptor
