package idempotency

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// resend's pause doubles from resendPause up to resendPauseMax.
const (
	resendPause    = 50 * time.Millisecond
	resendPauseMax = time.Second
)

// resend makes send, an outcome call, again while it fails with a connection
// error and ctx lasts: a Complete never made leaves the key in flight until
// the lease ends. A resent Complete that had landed succeeds; a resent
// Release gets store.ErrNotOwner.
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

// connectionError reports whether err is a failure to reach the store: a
// *net.OpError, or a connection closed (io.EOF, io.ErrUnexpectedEOF).
func connectionError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
