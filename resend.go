package idempotency

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// The pause before an outcome call is sent again: resendPause after the
// first try, doubling after each later one up to resendPauseMax.
const (
	resendPause    = 50 * time.Millisecond
	resendPauseMax = time.Second
)

// resend makes send, a store call that records an outcome (Complete or
// Release), with ctx, its record context, and makes it again after a pause
// while it fails with a connection error and ctx has not ended: a failover
// takes seconds, and a Complete never made leaves its key in flight, to
// run again once the lease ends. It returns the last try's error. A try
// that failed may have reached the store all the same: a Complete sent
// again then finds the record completed under its own lease and succeeds,
// and a Release sent again gets store.ErrNotOwner.
func resend(ctx context.Context, send func(context.Context) error) error {
	pause := resendPause
	for {
		err := send(ctx)
		if err == nil || !connectionError(err) || ctx.Err() != nil {
			return err
		}
		wait := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			wait.Stop()
			return err
		case <-wait.C:
		}
		pause = min(2*pause, resendPauseMax)
	}
}

// connectionError reports whether err is a failure to reach the store
// rather than its answer: a network operation that failed (go-redis and
// pgx wrap the *net.OpError of a refused, reset or timed-out connection)
// or a connection the server closed (io.EOF, io.ErrUnexpectedEOF).
func connectionError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
