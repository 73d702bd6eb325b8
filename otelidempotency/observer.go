package otelidempotency

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// The attributes' keys.
const (
	outcomeKey     = attribute.Key("idempotency.outcome")
	operationKey   = attribute.Key("idempotency.store.operation")
	errorTypeKey   = attribute.Key("error.type")
	leaseResultKey = attribute.Key("idempotency.lease.result")
	waitResultKey  = attribute.Key("idempotency.wait.result")
	durationKey    = attribute.Key("idempotency.store.duration")
	keyKey         = attribute.Key("idempotency.key")
	scopeKey       = attribute.Key("idempotency.scope")
)

// durationBuckets are the histograms' bucket bounds, in seconds: from a
// store call on the same host to a handler that takes a while.
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// observer turns the middleware's events into measurements and span
// events. Its option tables hold an attribute set made once for each
// known value, so that a measurement costs no allocation.
type observer struct {
	requests        metric.Int64Counter
	handlerDuration metric.Float64Histogram
	storeDuration   metric.Float64Histogram
	renewals        metric.Int64Counter
	waitDuration    metric.Float64Histogram
	jobs            metric.Int64Counter
	jobDuration     metric.Float64Histogram
	tracer          trace.Tracer // nil: no store spans

	outcomes attributeSets[idempotency.Outcome]
	ops      attributeSets[idempotency.StoreOp]
	leases   attributeSets[idempotency.LeaseResult]
	waits    attributeSets[idempotency.WaitResult]
	events   map[idempotency.StoreOp]string // a store call's span event (and span) name
}

func newObserver(meter metric.Meter) *observer {
	o := &observer{
		requests: counter(meter.Int64Counter("idempotency.requests", metric.WithUnit("{request}"),
			metric.WithDescription("Requests the idempotency middleware decided, by outcome."))),
		handlerDuration: histogram(meter.Float64Histogram("idempotency.handler.duration", metric.WithUnit("s"),
			metric.WithDescription("How long the handler ran, by the request's outcome."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
		storeDuration: histogram(meter.Float64Histogram("idempotency.store.duration", metric.WithUnit("s"),
			metric.WithDescription("How long each call to the idempotency store took."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
		renewals: counter(meter.Int64Counter("idempotency.lease.renewals", metric.WithUnit("{renewal}"),
			metric.WithDescription("Renewals of running handlers' leases, by result."))),
		waitDuration: histogram(meter.Float64Histogram("idempotency.wait.duration", metric.WithUnit("s"),
			metric.WithDescription("How long duplicates waited for a key in flight, by how the wait ended."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
		jobs: counter(meter.Int64Counter("idempotency.jobs", metric.WithUnit("{job}"),
			metric.WithDescription("Calls of idempotency.Do, by outcome."))),
		jobDuration: histogram(meter.Float64Histogram("idempotency.job.duration", metric.WithUnit("s"),
			metric.WithDescription("How long the jobs of idempotency.Do ran, by outcome."),
			metric.WithExplicitBucketBoundaries(durationBuckets...))),
		outcomes: newAttributeSets(outcomeKey, idempotency.OutcomeExecuted, idempotency.OutcomeReleased,
			idempotency.OutcomeReplayed, idempotency.OutcomeKeyInFlight, idempotency.OutcomeKeyReused, idempotency.OutcomeKeyExpired,
			idempotency.OutcomeNotReplayable, idempotency.OutcomeStoreUnavailable, idempotency.OutcomeFailOpen,
			idempotency.OutcomeKeyMissing, idempotency.OutcomeKeyInvalid, idempotency.OutcomeBodyTooLarge,
			idempotency.OutcomeRequestInterrupted, idempotency.OutcomeScopeMissing, idempotency.OutcomeRecordSealed),
		ops: newAttributeSets(operationKey, idempotency.StoreClaim, idempotency.StoreRenew,
			idempotency.StoreComplete, idempotency.StoreRelease, idempotency.StoreCommit, idempotency.StoreRollback),
		leases: newAttributeSets(leaseResultKey, idempotency.LeaseRenewed, idempotency.LeaseFailed, idempotency.LeaseLost),
		waits: newAttributeSets(waitResultKey, idempotency.WaitAnswered, idempotency.WaitClaimed,
			idempotency.WaitTimedOut, idempotency.WaitInterrupted, idempotency.WaitFailed),
		events: make(map[idempotency.StoreOp]string),
	}
	for op := range o.ops.add {
		o.events[op] = "idempotency " + string(op)
	}
	return o
}

// instrument returns i, reporting err, if any, to otel.Handle, or none, an
// instrument that records nothing, if the meter returned no instrument
// (as it may with an error).
func instrument[I any](i I, err error, none I) I {
	if err != nil {
		otel.Handle(err)
	}
	if any(i) == nil {
		return none
	}
	return i
}

// counter and histogram are instrument for the kinds the observer uses.
func counter(c metric.Int64Counter, err error) metric.Int64Counter {
	return instrument(c, err, metric.Int64Counter(noop.Int64Counter{}))
}

func histogram(h metric.Float64Histogram, err error) metric.Float64Histogram {
	return instrument(h, err, metric.Float64Histogram(noop.Float64Histogram{}))
}

func (o *observer) request(ctx context.Context, e idempotency.RequestEvent) {
	o.requests.Add(ctx, 1, o.outcomes.addOptions(e.Outcome)...)
	if e.HandlerRan {
		o.handlerDuration.Record(ctx, e.Handler.Seconds(), o.outcomes.recordOptions(e.Outcome)...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(outcomeKey.String(string(e.Outcome)))
		if e.Key != "" {
			span.SetAttributes(keyKey.String(e.Key))
		}
		if e.Scope != "" {
			span.SetAttributes(scopeKey.String(e.Scope))
		}
	}
}

func (o *observer) job(ctx context.Context, e idempotency.JobEvent) {
	o.jobs.Add(ctx, 1, o.outcomes.addOptions(e.Outcome)...)
	if e.Ran {
		o.jobDuration.Record(ctx, e.Duration.Seconds(), o.outcomes.recordOptions(e.Outcome)...)
	}
}

func (o *observer) storeCall(ctx context.Context, e idempotency.StoreEvent) {
	if e.Err == nil {
		o.storeDuration.Record(ctx, e.Duration.Seconds(), o.ops.recordOptions(e.Op)...)
	} else {
		o.storeDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(
			operationKey.String(string(e.Op)), errorTypeKey.String(errorType(e.Err))))
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	name, ok := o.events[e.Op]
	if !ok {
		name = "idempotency " + string(e.Op)
	}
	attrs := []attribute.KeyValue{operationKey.String(string(e.Op)), durationKey.Float64(e.Duration.Seconds())}
	if e.Err != nil {
		attrs = append(attrs, errorTypeKey.String(errorType(e.Err)))
	}
	end := time.Now()
	span.AddEvent(name, trace.WithTimestamp(end), trace.WithAttributes(attrs...))
	if o.tracer != nil {
		_, child := o.tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-e.Duration)),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs[0]))
		if e.Err != nil {
			child.SetAttributes(attrs[len(attrs)-1])
			child.SetStatus(codes.Error, errorType(e.Err))
		}
		child.End(trace.WithTimestamp(end))
	}
}

func (o *observer) lease(ctx context.Context, e idempotency.LeaseEvent) {
	o.renewals.Add(ctx, 1, o.leases.addOptions(e.Result)...)
	if e.Result == idempotency.LeaseLost {
		trace.SpanFromContext(ctx).AddEvent("idempotency lease lost")
	}
}

func (o *observer) wait(ctx context.Context, e idempotency.WaitEvent) {
	o.waitDuration.Record(ctx, e.Duration.Seconds(), o.waits.recordOptions(e.Result)...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("idempotency wait", trace.WithAttributes(waitResultKey.String(string(e.Result))))
	}
}

// errorType is a failed store call's error.type: a few causes worth an
// alert of their own, else "_OTHER", as OpenTelemetry's conventions name
// an error of no known type.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, store.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, store.ErrFull):
		return "full"
	default:
		return "_OTHER"
	}
}

// attributeSets holds, for each known value of one attribute, the
// measurement options of that attribute alone, as the slices the
// instruments take (so that passing them allocates nothing).
type attributeSets[V ~string] struct {
	key    attribute.Key
	add    map[V][]metric.AddOption
	record map[V][]metric.RecordOption
}

func newAttributeSets[V ~string](key attribute.Key, values ...V) attributeSets[V] {
	s := attributeSets[V]{key: key,
		add: make(map[V][]metric.AddOption, len(values)), record: make(map[V][]metric.RecordOption, len(values))}
	for _, v := range values {
		opt := metric.WithAttributeSet(attribute.NewSet(key.String(string(v))))
		s.add[v], s.record[v] = []metric.AddOption{opt}, []metric.RecordOption{opt}
	}
	return s
}

// addOptions returns the options of v for a counter, made now if v is not
// known.
func (s attributeSets[V]) addOptions(v V) []metric.AddOption {
	if opts, ok := s.add[v]; ok {
		return opts
	}
	return []metric.AddOption{metric.WithAttributes(s.key.String(string(v)))}
}

// recordOptions returns the options of v for a histogram, made now if v
// is not known.
func (s attributeSets[V]) recordOptions(v V) []metric.RecordOption {
	if opts, ok := s.record[v]; ok {
		return opts
	}
	return []metric.RecordOption{metric.WithAttributes(s.key.String(string(v)))}
}
