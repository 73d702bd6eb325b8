package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
)

// decodeJSON reads one JSON object from r's body into v, refusing unknown
// fields, trailing data, and a member named twice (see uniqueNames).
func decodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if err := uniqueNames(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// uniqueNames returns an error if the JSON object in data names one of its
// members twice, in any letter case. encoding/json would keep the last
// value it matches, case-insensitively, so {"amount": 5, "AMOUNT": 7000}
// would pay 7000 where a reader of the first member sees 5. Anything that
// is not an object is left for the decoder to refuse.
func uniqueNames(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var seen []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		if slices.ContainsFunc(seen, func(s string) bool { return strings.EqualFold(s, name) }) {
			return fmt.Errorf("the member %q is named twice", name)
		}
		seen = append(seen, name)
		var value json.RawMessage
		if dec.Decode(&value) != nil {
			return nil
		}
	}
	return nil
}

// The problem types of a request body that readRequest refuses, each the
// address of its section of docs/example.md.
const (
	problemInvalidPayment = "https://github.com/seed43327c4c/idempotency/blob/main/docs/example.md#invalid-payment"
	problemInvalidEmail   = "https://github.com/seed43327c4c/idempotency/blob/main/docs/example.md#invalid-email"
)

// requestBody is the JSON body of a request, read with readRequest.
type requestBody interface {
	// problemType is the type of the 400 problem for a body readRequest
	// refuses.
	problemType() string
	// usage says what the body must look like, for a body that does not
	// decode.
	usage() string
	// invalid says what is wrong with the decoded body, or is "" when
	// nothing is.
	invalid() string
}

// readRequest decodes r's body into body (see decodeJSON) and checks it.
// When the body does not decode, or is invalid, it answers 400 with the
// body's problem type and its usage or what is invalid, tells the
// idempotency middleware not to record that answer (the key is released,
// so the client may correct the body and send it again with the same key),
// and returns false.
func readRequest(w http.ResponseWriter, r *http.Request, body requestBody) bool {
	detail := ""
	if err := decodeJSON(r, body); err != nil {
		detail = body.usage()
	} else {
		detail = body.invalid()
	}
	if detail == "" {
		return true
	}
	idempotency.DoNotRecord(r.Context())
	httpx.WriteProblem(w, httpx.Problem{Type: body.problemType(), Status: http.StatusBadRequest,
		Title: "The request body is invalid", Detail: detail})
	return false
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
