package storetest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// testClaimNewKey: Claim on a key never seen wins.
func testClaimNewKey(t *testing.T, s store.Store) {
	mustClaim(t, s, "new", "fp-new", longLease)
}

// testClaimInFlightKey: Claim on a key in flight under a live lease loses,
// reports the first claim's record without its token, and changes nothing.
func testClaimInFlightKey(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "busy", "fp-first", longLease)
	rec := mustLose(t, s, "busy", "fp-second")
	require.Equal(t, store.StateInFlight, rec.State)
	require.Equal(t, "fp-first", rec.Fingerprint, "a lost claim reports the first claim's fingerprint")
	require.Nil(t, rec.Response)
	requireTTL(t, rec.TTL, longLease)

	resp := sampleResponse()
	complete(t, s, "busy", owner, resp)
	requireCompleted(t, s, "busy", "fp-first", resp)
}

// testClaimCompletedKey: every Claim on a completed key loses and returns
// the stored response.
func testClaimCompletedKey(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "done", "fp-first", longLease)
	resp := sampleResponse()
	complete(t, s, "done", owner, resp)
	for range 3 {
		requireCompleted(t, s, "done", "fp-first", resp)
	}
}

// testCompleteNilIsUnreplayable: Complete with a nil response makes the
// key unreplayable.
func testCompleteNilIsUnreplayable(t *testing.T, s store.Store) {
	owner := mustClaim(t, s, "huge", "fp-first", longLease)
	complete(t, s, "huge", owner, nil)
	rec := mustLose(t, s, "huge", "fp-second")
	require.Equal(t, store.StateUnreplayable, rec.State)
	require.Equal(t, "fp-first", rec.Fingerprint)
	require.Nil(t, rec.Response, "an unreplayable record has no response")
	requireTTL(t, rec.TTL, retention)
}

// testDistinctKeysAreIndependent: keys that differ in any byte are
// separate records, whatever bytes they hold (hash-tag braces, control
// bytes as in the middleware's keys, a long key).
func testDistinctKeysAreIndependent(t *testing.T, s store.Store) {
	keys := []string{
		"a", "A", "ab", "a:b", "a:b:", "{a}", "{a}:b", "a b", "a/b/c?d=e",
		"POST /payments tenant-7 key-1", "ключ-🔑", strings.Repeat("k", 512),
		"\x00", "\x00\x00", "\x08tenant-1\x04POST\x09/payments\x03k-1\x00",
		"\x08tenant-1\x04POST\x09/payments\x03k-2\x00", "\xff\xfe", strings.Repeat("\x01k", 2048),
	}
	owners := make([]store.Lease, len(keys))
	for i, key := range keys {
		owners[i] = mustClaim(t, s, key, fmt.Sprint("fp-", i), longLease)
	}
	for i, key := range keys {
		if i%2 == 0 {
			complete(t, s, key, owners[i], keyedResponse(key))
		}
	}
	for i, key := range keys {
		fp := fmt.Sprint("fp-", i)
		if i%2 == 0 {
			requireCompleted(t, s, key, fp, keyedResponse(key))
		} else {
			requireInFlight(t, s, key, fp, longLease)
		}
	}
}

// keyedResponse is a response naming key, quoted so that a key's control
// bytes stay out of the header.
func keyedResponse(key string) *store.Response {
	quoted := strconv.Quote(key)
	return &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"X-Key": {quoted}},
		Body:   []byte("response for " + quoted),
	}
}
