package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
)

// decodeJSON reads one JSON object from r's body into v, refusing unknown
// fields and trailing data.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// badRequest answers 400 with a problem+json body explaining detail.
func badRequest(w http.ResponseWriter, detail string) {
	httpx.WriteProblem(w, httpx.Problem{Status: http.StatusBadRequest, Detail: detail})
}
