// Package otelidempotency reports what the idempotency middleware decides
// and does to OpenTelemetry: New returns an idempotency.Observer that counts
// outcomes, times the handler, each store call and each wait, counts lease
// renewals, and marks the request's current span (the server span of
// otelhttp, say) with the outcome and an event per store call; given to Do
// (idempotency.DoObserver), it counts and times jobs by outcome. The meter
// and tracer are named ScopeName; docs/observability.md lists the
// instruments.
//
//	obs := otelidempotency.New()
//	mw := idempotency.New(idempotency.WithObserver(obs))
//	result, err := idempotency.Do(ctx, st, key, fn, idempotency.DoObserver(obs))
package otelidempotency

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed43327c4c/idempotency"
)

// ScopeName is the instrumentation scope of the meter and tracer New uses.
const ScopeName = "github.com/seed43327c4c/idempotency/otelidempotency"

// Option configures New.
type Option func(*config)

type config struct {
	meters     metric.MeterProvider
	tracers    trace.TracerProvider
	storeSpans bool
}

// WithMeterProvider sets where the metrics go. Defaults to the global
// MeterProvider (otel.GetMeterProvider) as New finds it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	if mp == nil {
		panic("otelidempotency: WithMeterProvider expects a non-nil provider")
	}
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider sets the provider of the tracer that starts store call
// spans (WithStoreSpans); the request's own span is the one in its context.
// Defaults to the global TracerProvider (otel.GetTracerProvider) as New
// finds it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	if tp == nil {
		panic("otelidempotency: WithTracerProvider expects a non-nil provider")
	}
	return func(c *config) { c.tracers = tp }
}

// WithStoreSpans adds a child span of the request's span for each store
// call, named "idempotency <operation>" (idempotency claim, ...), over the
// call's time, with an error status if it failed. Defaults to off: the
// request's span gets an event per call instead, and no span is started.
func WithStoreSpans() Option {
	return func(c *config) { c.storeSpans = true }
}

// New returns the observer to pass to idempotency.WithObserver. An
// instrument the meter refuses is reported to otel.Handle and left out.
func New(opts ...Option) idempotency.Observer {
	c := &config{}
	for _, opt := range opts {
		opt(c)
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	o := newObserver(c.meters.Meter(ScopeName))
	if c.storeSpans {
		if c.tracers == nil {
			c.tracers = otel.GetTracerProvider()
		}
		o.tracer = c.tracers.Tracer(ScopeName)
	}
	return idempotency.Observer{Request: o.request, StoreCall: o.storeCall, Lease: o.lease, Wait: o.wait, Job: o.job}
}
