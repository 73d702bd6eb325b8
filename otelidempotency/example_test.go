package otelidempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/otelidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// ExampleNew counts a request and its replay. A service passes its own
// MeterProvider (or none, for the global one) and reads the metrics
// through its exporter; here a ManualReader reads them.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mw := idempotency.New(idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp))))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", "order-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	printCounts(reader, "idempotency.requests")
	// Unordered output:
	// executed 1
	// replayed 1
}

// ExampleNew_jobs counts a job and its redelivery: the observer given to
// Do as to the middleware.
func ExampleNew_jobs() {
	reader := sdkmetric.NewManualReader()
	obs := otelidempotency.New(otelidempotency.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	st := store.NewMemory()
	for range 2 {
		_, _ = idempotency.Do(context.Background(), st, "receipt:42", func(context.Context) ([]byte, error) {
			return []byte("sent"), nil
		}, idempotency.DoObserver(obs))
	}

	printCounts(reader, "idempotency.jobs")
	// Unordered output:
	// executed 1
	// replayed 1
}

// printCounts prints the counter name's values by outcome, as reader
// collects them.
func printCounts(reader *sdkmetric.ManualReader, name string) {
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != name {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value("idempotency.outcome")
			fmt.Println(outcome.AsString(), p.Value)
		}
	}
}
