// Package grpcidempotency makes unary gRPC calls idempotent: a server
// interceptor runs each call carrying an idempotency key once among every
// server sharing a store and replays its reply to duplicates, and a client
// interceptor keys each call and retries it under its key.
package grpcidempotency

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// ReplayedMetadata is the header metadata, set to "true", of a replayed
// reply.
const ReplayedMetadata = "idempotent-replayed"

// UnaryServerInterceptor returns an interceptor that runs each unary call
// with a key (metadata idempotency-key, or WithKeyField) once per scope,
// method and key among every server sharing s, through idempotency.Do. A
// duplicate with the same request gets the recorded reply or status and
// header metadata, plus idempotent-replayed: true; Aborted while the first
// runs (or the replay, WithWait); FailedPrecondition with another request;
// Unavailable when the store fails. It panics if s is nil or a nil pointer.
func UnaryServerInterceptor(s store.Store, opts ...Option) grpc.UnaryServerInterceptor {
	if s == nil || isNilPointer(s) {
		panic("grpcidempotency: UnaryServerInterceptor expects a store")
	}
	c := newConfig(opts)
	_, tx := s.(store.TxStore)
	i := &interceptor{config: c, store: s, tx: tx, doOpts: c.doOptions()}
	return i.intercept
}

type interceptor struct {
	*config
	store  store.Store
	tx     bool // the handler's writes commit with the record
	doOpts []idempotency.DoOption
}

// errReleased is what a call returns to Do to release its key.
var errReleased = errors.New("grpcidempotency: released")

func (i *interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	msg, ok := req.(proto.Message)
	if !ok || i.methods != nil && !i.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	key, err := i.key(ctx, msg)
	switch {
	case err != nil:
		return nil, err
	case key == "" && i.keyRequired:
		return nil, status.Error(codes.InvalidArgument, "missing idempotency-key")
	case key == "":
		return handler(ctx, req)
	}
	fp, err := fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the request cannot be marshalled: %v", err)
	}
	scope := ""
	if i.scope != nil {
		scope = i.scope(ctx)
	}
	c := &call{i: i, method: info.FullMethod, req: req, handler: handler}
	opts := append(i.doOpts[:len(i.doOpts):len(i.doOpts)],
		idempotency.DoScope(doScope(scope, info.FullMethod)), idempotency.DoFingerprint(fp))
	stored, err := idempotency.Do(ctx, i.store, key, c.run, opts...)
	if c.ran {
		return c.answer(ctx, err)
	}
	return i.answerFromRecord(ctx, stored, err)
}

// call is one call that claimed its key.
type call struct {
	i       *interceptor
	method  string
	req     any
	handler grpc.UnaryHandler
	ran     bool
	resp    any
	err     error
}

// run runs the handler under Do and returns its encoded outcome, or
// errReleased to free the key.
func (c *call) run(ctx context.Context) ([]byte, error) {
	c.ran = true
	rec := &recordingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	hctx := ctx
	if rec.ServerTransportStream != nil {
		hctx = grpc.NewContextWithServerTransportStream(ctx, rec)
	}
	c.resp, c.err = c.handler(hctx, c.req)
	if c.releases(ctx) {
		return nil, errReleased
	}
	header, trailer := rec.recorded()
	stored, err := encodeReply(c.resp, c.err, header, trailer)
	if err != nil {
		c.i.errorHandler(ctx, fmt.Errorf("grpcidempotency: the reply of %s cannot be stored, its key is released: %w", c.method, err))
		return nil, errReleased
	}
	return stored, nil
}

// releases reports whether the handler's outcome frees the key: an error
// once ctx ended (its client may retry), else as the record policy says.
func (c *call) releases(ctx context.Context) bool {
	code := status.Code(c.err)
	if ctx.Err() != nil && code != codes.OK {
		return true
	}
	return !c.i.record(c.method, code)
}

// answer returns the handler's outcome once Do has recorded it or released
// the key. A reply whose record failed still goes out, as the handler ran,
// unless it ran in a transaction that was rolled back.
func (c *call) answer(ctx context.Context, err error) (any, error) {
	switch {
	case err == nil, errors.Is(err, errReleased):
	case c.i.tx:
		c.i.errorHandler(ctx, err)
		return nil, status.Error(codes.Unavailable, "the idempotency store could not record the reply")
	default:
		c.i.errorHandler(ctx, err)
	}
	return c.resp, c.err
}

// answerFromRecord answers a call whose handler did not run.
func (i *interceptor) answerFromRecord(ctx context.Context, stored []byte, err error) (any, error) {
	switch {
	case err == nil:
		return i.replay(ctx, stored)
	case errors.Is(err, idempotency.ErrKeyReused):
		return nil, status.Error(codes.FailedPrecondition, "the idempotency-key was used with another request")
	case errors.Is(err, idempotency.ErrInFlight):
		return nil, status.Error(codes.Aborted, "a call with this idempotency-key is in flight")
	case errors.Is(err, idempotency.ErrKeyExpired):
		return nil, status.Error(codes.FailedPrecondition, "the call with this idempotency-key ran; its record expired")
	case errors.Is(err, idempotency.ErrNotStored):
		return nil, status.Error(codes.FailedPrecondition, "the call with this idempotency-key ran; its reply was not stored")
	case errors.Is(err, idempotency.ErrRecordSealed):
		i.errorHandler(ctx, err)
		return nil, status.Error(codes.FailedPrecondition, "the call with this idempotency-key ran; its stored reply cannot be opened")
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	i.errorHandler(ctx, err)
	return nil, status.Error(codes.Unavailable, "the idempotency store is unavailable")
}

// replay sends a recorded reply, its header metadata marked replayed.
func (i *interceptor) replay(ctx context.Context, stored []byte) (any, error) {
	r, err := decodeReply(stored)
	if err != nil {
		i.errorHandler(ctx, err)
		return nil, status.Error(codes.Internal, "the stored reply cannot be read")
	}
	if err := grpc.SetHeader(ctx, metadata.Join(r.header, replayedHeader)); err != nil {
		i.errorHandler(ctx, fmt.Errorf("grpcidempotency: replay: %w", err))
	}
	if len(r.trailer) > 0 {
		if err := grpc.SetTrailer(ctx, r.trailer); err != nil {
			i.errorHandler(ctx, fmt.Errorf("grpcidempotency: replay: %w", err))
		}
	}
	if r.status != nil {
		return nil, status.ErrorProto(r.status)
	}
	return r.message, nil
}

var replayedHeader = metadata.Pairs(ReplayedMetadata, "true")

// Replayed reports whether header, a call's header metadata (grpc.Header),
// marks a replayed reply.
func Replayed(header metadata.MD) bool {
	v := header.Get(ReplayedMetadata)
	return len(v) == 1 && v[0] == "true"
}
