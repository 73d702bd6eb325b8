package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
)

// signatureTolerance is how far a signature's timestamp may be from now:
// an older signed delivery, replayed by someone who captured it, is refused.
const signatureTolerance = 5 * time.Minute

// maxEventBytes is the largest webhook body read, the middleware's limit.
const maxEventBytes = 1 << 20

// problemBadSignature is the type of the 400 for a delivery whose
// Stripe-Signature does not verify, the address of its section of
// docs/example.md.
const problemBadSignature = "https://github.com/seed43327c4c/idempotency/blob/main/docs/example.md#bad-signature"

// verifySignature passes on to next only the requests whose
// Stripe-Signature header ("t=UNIX,v1=HEX[,v1=HEX...]") holds a v1 that is
// the hex HMAC-SHA256 under secret of "t.body", with t within
// signatureTolerance of now. Others get 400 and never reach next, so a
// forged event claims no key.
func verifySignature(secret []byte, now func() time.Time, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			httpx.WriteProblem(w, httpx.Problem{Status: http.StatusRequestEntityTooLarge})
			return
		case err != nil:
			httpx.WriteProblem(w, httpx.Problem{Status: http.StatusBadRequest, Detail: "the body could not be read"})
			return
		}
		if reason := checkSignature(r.Header.Get("Stripe-Signature"), body, secret, now()); reason != "" {
			httpx.WriteProblem(w, httpx.Problem{Type: problemBadSignature, Status: http.StatusBadRequest,
				Title: "The webhook signature does not verify", Detail: reason})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// checkSignature returns why header does not sign body under secret at
// now, or "" if it does.
func checkSignature(header string, body, secret []byte, now time.Time) string {
	var stamp string
	var signatures [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			stamp = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil {
				signatures = append(signatures, sig)
			}
		}
	}
	seconds, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil || len(signatures) == 0 {
		return "send Stripe-Signature: t=UNIX_TIME,v1=HEX_HMAC_SHA256_OF_T.BODY"
	}
	if age := now.Sub(time.Unix(seconds, 0)); age > signatureTolerance || age < -signatureTolerance {
		return "the signature's timestamp is more than 5 minutes from now"
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(stamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range signatures {
		if hmac.Equal(sig, want) {
			return ""
		}
	}
	return "no v1 signature matches the body under the webhook secret"
}
