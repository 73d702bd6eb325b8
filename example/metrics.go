package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/otelidempotency"
)

// workerLabel is the label on every series of GET /metrics that names the
// worker process serving it, by its pid, as X-Worker-Pid does.
const workerLabel = "worker"

// metrics is this worker's own metrics: the observer that feeds the
// idempotency middleware's measurements into them, and GET /metrics, which
// serves them in the Prometheus text format through OpenTelemetry's
// Prometheus exporter.
type metrics struct {
	observer idempotency.Observer
	handler  http.Handler
	shutdown func(context.Context) error
}

// newMetrics makes this worker's metrics, on a registry of its own, each
// series labelled with the worker (workerLabel).
func newMetrics() (*metrics, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry),
		otelprometheus.WithResourceAsConstantLabels(attribute.NewAllowKeysFilter(workerLabel)))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String(workerLabel, pid))))
	return &metrics{
		observer: otelidempotency.New(otelidempotency.WithMeterProvider(provider)),
		handler:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		shutdown: provider.Shutdown,
	}, nil
}

// withMetrics serves GET /metrics from m, needing no account, and every
// other request from next.
func withMetrics(m *metrics, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", workerPid(m.handler))
	mux.Handle("/", next)
	return mux
}
