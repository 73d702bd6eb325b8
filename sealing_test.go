package idempotency_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// sealRing returns a ring of the keys named, the first current; a key's
// secret is its name repeated, so two rings agree on a name's secret.
func sealRing(t testing.TB, ids ...string) *seal.Ring {
	t.Helper()
	var src strings.Builder
	for _, id := range ids {
		secret := bytes.Repeat([]byte(id), seal.KeySize)[:seal.KeySize]
		fmt.Fprintf(&src, "%s %s\n", id, base64.StdEncoding.EncodeToString(secret))
	}
	ring, err := seal.ParseRing(strings.NewReader(src.String()))
	require.NoError(t, err)
	return ring
}

// paymentBody is the i-th payment: a card number and a customer only the
// response holds.
func paymentBody(i int) string {
	return fmt.Sprintf(`{"card":"4242-0000-0000-%04d","customer":"cus_secret_%d"}`, i, i)
}

// plainParts are what a payment's stored record must not show: its body's
// contents and its replayed headers' values.
var plainParts = []string{"4242-", "cus_secret", "application/json", "/payments/1", "Content-Type", "Location"}

// requireSealedDump fails if any record of s shows one of plainParts.
func requireSealedDump(t *testing.T, s store.Admin, records int) {
	t.Helper()
	ctx := context.Background()
	hashes, err := s.Find(ctx, "", 2*records)
	require.NoError(t, err)
	require.Len(t, hashes, records)
	for _, hash := range hashes {
		rec, found, err := s.Inspect(ctx, hash)
		require.NoError(t, err)
		require.True(t, found)
		require.NotNil(t, rec.Response)
		raw := fmt.Sprint(rec.Response.Status, rec.Response.Header, string(rec.Response.Body))
		for _, part := range plainParts {
			require.NotContains(t, raw, part, "record %s", hash)
		}
	}
}

type replayedAnswer struct {
	status int
	header http.Header
	body   string
}

func answerOf(t *testing.T, resp *http.Response) replayedAnswer {
	t.Helper()
	h := resp.Header.Clone()
	h.Del("Idempotent-Replayed")
	h.Del("X-Run")      // not replayed
	h.Del("Set-Cookie") // never replayed
	return replayedAnswer{resp.StatusCode, h, readAll(t, resp)}
}

func TestWithSealer(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name+": replays byte for byte from a sealed record", func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "k1")))(h)
			first := answerOf(t, post(mw, "k-1", paymentBody(1)))
			replay := post(mw, "k-1", paymentBody(1))
			require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
			require.Equal(t, first, answerOf(t, replay))
			require.Equal(t, int64(1), h.runs.Load())
			admin := s.(store.Admin)
			requireSealedDump(t, admin, 1)
		})
	}

	t.Run("a record under a removed key is 503 record-sealed and never runs", func(t *testing.T) {
		s := store.NewMemory()
		h := &paymentHandler{}
		post(idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "old")))(h), "k-1", paymentBody(1))
		var errs errorLog
		var outcomes []idempotency.Outcome
		var mu sync.Mutex
		observer := idempotency.Observer{Request: func(_ context.Context, e idempotency.RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, e.Outcome)
		}}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "new")),
			errs.option(), idempotency.WithObserver(observer))(h)
		for range 2 {
			resp := post(mw, "k-1", paymentBody(1))
			require.Empty(t, resp.Header.Get("Retry-After"))
			requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.ProblemRecordSealed)
		}
		require.Equal(t, int64(1), h.runs.Load())
		require.Len(t, errs.all(), 2)
		require.ErrorIs(t, errs.all()[0], seal.ErrKeyMissing)
		var re *idempotency.RecordError
		require.ErrorAs(t, errs.all()[0], &re)
		require.NotContains(t, errs.all()[0].Error(), "4242")
		require.Equal(t, []idempotency.Outcome{idempotency.OutcomeRecordSealed, idempotency.OutcomeRecordSealed}, outcomes)

		resp := post(mw, "k-1", paymentBody(2))
		requireProblem(t, resp, http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
	})

	t.Run("a sealed record without a sealer is 503 record-sealed", func(t *testing.T) {
		s := store.NewMemory()
		h := &paymentHandler{}
		post(idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "k1")))(h), "k-1", paymentBody(1))
		var errs errorLog
		requireProblem(t, post(idempotency.New(idempotency.WithStore(s), errs.option())(h), "k-1", paymentBody(1)),
			http.StatusServiceUnavailable, idempotency.ProblemRecordSealed)
		require.ErrorIs(t, errs.all()[0], seal.ErrKeyMissing)
		_, err := idempotency.Do(context.Background(), s, "job", func(context.Context) ([]byte, error) { return []byte("x"), nil },
			idempotency.DoSealer(sealRing(t, "k1")))
		require.NoError(t, err)
		_, err = idempotency.Do(context.Background(), s, "job", func(context.Context) ([]byte, error) { return []byte("y"), nil })
		require.ErrorIs(t, err, idempotency.ErrRecordSealed)
		require.Equal(t, int64(1), h.runs.Load())
	})

	t.Run("a changed record is 503 record-sealed", func(t *testing.T) {
		s := &tamperingStore{Store: store.NewMemory()}
		h := &paymentHandler{}
		var errs errorLog
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "k1")), errs.option())(h)
		post(mw, "k-1", paymentBody(1))
		s.tamper.Store(true)
		requireProblem(t, post(mw, "k-1", paymentBody(1)), http.StatusServiceUnavailable, idempotency.ProblemRecordSealed)
		require.ErrorIs(t, errs.all()[0], seal.ErrCorrupt)
		require.Equal(t, int64(1), h.runs.Load())
	})

	t.Run("a record stored before sealing replays", func(t *testing.T) {
		s := store.NewMemory()
		h := &paymentHandler{}
		first := answerOf(t, post(idempotency.New(idempotency.WithStore(s))(h), "k-1", paymentBody(1)))
		replay := post(idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "k1")))(h), "k-1", paymentBody(1))
		require.Equal(t, first, answerOf(t, replay))
		require.Equal(t, int64(1), h.runs.Load())
	})

	t.Run("the replay cache keeps the opened response", func(t *testing.T) {
		s := &countingStore{Store: store.NewMemory()}
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(sealRing(t, "k1")),
			idempotency.WithReplayCache(10, time.Hour))(h)
		first := answerOf(t, post(mw, "k-1", paymentBody(1)))
		var replay *http.Response
		require.Zero(t, s.callsOf(func() { replay = post(mw, "k-1", paymentBody(1)) }))
		require.Equal(t, first, answerOf(t, replay))
	})

	t.Run("nil ring panics", func(t *testing.T) {
		require.PanicsWithValue(t, "idempotency: WithSealer expects a non-nil ring", func() { idempotency.WithSealer(nil) })
		require.PanicsWithValue(t, "idempotency: DoSealer expects a non-nil ring", func() { idempotency.DoSealer(nil) })
	})
}

// tamperingStore flips the last byte of every stored body Claim returns
// while tamper is set, as a write to the store by someone else would.
type tamperingStore struct {
	store.Store
	tamper atomic.Bool
}

func (s *tamperingStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	rec, claimed, err := s.Store.Claim(ctx, key, fp, token, lease)
	if s.tamper.Load() && rec.Response != nil {
		body := bytes.Clone(rec.Response.Body)
		body[len(body)-1] ^= 1
		rec.Response = &store.Response{Status: rec.Response.Status, Header: rec.Response.Header, Body: body}
	}
	return rec, claimed, err
}

// TestSealedPayments is issue 38's target: after 100 sealed payments the
// store shows none of them in plain text; after a rotation all 100 replay
// byte for byte; without the old key each is 503 record-sealed and none
// runs again.
func TestSealedPayments(t *testing.T) {
	const payments = 100
	s := store.NewMemory()
	h := &paymentHandler{}
	var errs errorLog
	pay := func(ring *seal.Ring, i int) *http.Response {
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithSealer(ring), errs.option())(h)
		return post(mw, fmt.Sprintf("pay-%d", i), paymentBody(i))
	}
	first := make([]replayedAnswer, payments)
	for i := range payments {
		first[i] = answerOf(t, pay(sealRing(t, "2026-01"), i))
		require.Equal(t, http.StatusCreated, first[i].status)
	}
	requireSealedDump(t, s, payments)

	rotated := sealRing(t, "2026-06", "2026-01")
	for i := range payments {
		require.Equal(t, first[i], answerOf(t, pay(rotated, i)), "payment %d", i)
	}
	removed := sealRing(t, "2026-06")
	for i := range payments {
		requireProblem(t, pay(removed, i), http.StatusServiceUnavailable, idempotency.ProblemRecordSealed)
	}
	assert.Equal(t, int64(payments), h.runs.Load())
	assert.Len(t, errs.all(), payments)
}

func TestDoSealer(t *testing.T) {
	ctx := context.Background()
	s := store.NewMemory()
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte("invoice 4242 for cus_secret"), nil }
	result, err := idempotency.Do(ctx, s, "job-1", fn, idempotency.DoSealer(sealRing(t, "old")))
	require.NoError(t, err)

	rec, found, err := s.Inspect(ctx, store.HashKey(idempotency.DoStorageKey("", "job-1")))
	require.NoError(t, err)
	require.True(t, found)
	require.NotContains(t, string(rec.Response.Body), "4242")

	again, err := idempotency.Do(ctx, s, "job-1", fn, idempotency.DoSealer(sealRing(t, "new", "old")))
	require.NoError(t, err)
	require.Equal(t, result, again)

	_, err = idempotency.Do(ctx, s, "job-1", fn, idempotency.DoSealer(sealRing(t, "new")))
	require.ErrorIs(t, err, idempotency.ErrRecordSealed)
	require.ErrorIs(t, err, seal.ErrKeyMissing)
	require.Equal(t, 1, runs)

	final := func(context.Context) ([]byte, error) { return nil, idempotency.Final(errors.New("card 4242 declined")) }
	_, err = idempotency.Do(ctx, s, "job-2", final, idempotency.DoSealer(sealRing(t, "k1")))
	require.EqualError(t, err, "card 4242 declined")
	_, err = idempotency.Do(ctx, s, "job-2", final, idempotency.DoSealer(sealRing(t, "k1")))
	require.True(t, idempotency.IsFinal(err))
	require.EqualError(t, err, "card 4242 declined")
}
