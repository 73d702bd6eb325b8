package idempotency

import (
	"context"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// PollEvery runs the waiting loop of WithWait and DoWait on key in s, with
// fallback polls every interval instead of waitPolls, and reports whether
// it ended because try reported done.
func PollEvery(ctx context.Context, interval, wait time.Duration, s store.Store, key string, try func() bool) bool {
	return backoff{first: interval, max: interval}.poll(ctx, wait, s, 0, key, try) == polledDone
}
