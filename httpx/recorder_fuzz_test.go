package httpx

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fuzzOp is one call a fuzzed handler makes on its Recorder.
type fuzzOp struct {
	kind byte // one of the op* constants
	code int  // for opFinal and opInformational
	size int  // body bytes, for the writing ops
}

const (
	opFinal         = iota // WriteHeader with a final code
	opInformational        // WriteHeader with a 1xx code
	opWrite                // Write
	opReadFrom             // ReadFrom from a reader with only Read
	opCopy                 // io.Copy from a bytes.Reader, which uses its WriteTo
	opFlush                // Flush
	opKinds
)

// Codes the fuzzer picks from; every final code here allows a body.
var (
	fuzzFinalCodes = []int{200, 201, 202, 203, 206, 400, 404, 418, 500, 503}
	fuzzInfoCodes  = []int{100, 102, 103}
)

// maxFuzzBody bounds the body one fuzzed handler writes.
const maxFuzzBody = 512 << 10

// decodeFuzzOps turns fuzz bytes into a body limit and a sequence of ops.
// Sizes reach past the 32 KiB copy buffer and limits past the small sizes, so
// every path through Write and ReadFrom gets exercised.
func decodeFuzzOps(data []byte) (limit int, ops []fuzzOp) {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	limit = int(next())
	if next()&1 == 1 {
		limit *= 257
	}
	total := 0
	for len(data) > 0 && len(ops) < 32 {
		op := fuzzOp{kind: next() % opKinds}
		switch op.kind {
		case opFinal:
			op.code = fuzzFinalCodes[int(next())%len(fuzzFinalCodes)]
		case opInformational:
			op.code = fuzzInfoCodes[int(next())%len(fuzzInfoCodes)]
		case opWrite, opReadFrom, opCopy:
			op.size = int(next()) << (next() % 10)
			op.size = min(op.size, maxFuzzBody-total)
			total += op.size
		}
		ops = append(ops, op)
	}
	return limit, ops
}

// fuzzOutcome is what a fuzzed handler did and what its Recorder recorded.
type fuzzOutcome struct {
	rec     *Recorder
	limit   int
	body    []byte // everything written, in order
	status  int    // first final code written, 0 if none
	step    int    // the op that wrote the status
	flushed bool
	err     error // first error from an op
}

// runFuzzOps is the fuzzed handler: it decodes ops from the request body and
// runs them on a Recorder over w. Before each op it sets X-Step to the op's
// index, so the header snapshot shows which op wrote the status.
func runFuzzOps(w http.ResponseWriter, r *http.Request) fuzzOutcome {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return fuzzOutcome{err: err}
	}
	limit, ops := decodeFuzzOps(data)
	out := fuzzOutcome{rec: NewRecorder(w, limit), limit: limit}
	implied := func(i int) {
		if out.status == 0 {
			out.status, out.step = http.StatusOK, i
		}
	}
	for i, op := range ops {
		out.rec.Header().Set("X-Step", strconv.Itoa(i))
		chunk := bytes.Repeat([]byte{byte(i + 'A')}, op.size)
		var err error
		switch op.kind {
		case opFinal:
			out.rec.WriteHeader(op.code)
			if out.status == 0 {
				out.status, out.step = op.code, i
			}
		case opInformational:
			out.rec.WriteHeader(op.code)
		case opWrite:
			implied(i)
			var n int
			n, err = out.rec.Write(chunk)
			out.body = append(out.body, chunk[:n]...)
		case opReadFrom, opCopy:
			if op.size > 0 {
				implied(i) // the first byte implies 200; nothing implies nothing
			}
			var n int64
			if op.kind == opReadFrom {
				n, err = out.rec.ReadFrom(readerOnly{bytes.NewReader(chunk)})
			} else {
				n, err = io.Copy(out.rec, bytes.NewReader(chunk))
			}
			if err == nil && n != int64(op.size) {
				err = io.ErrShortWrite
			}
			out.body = append(out.body, chunk[:n]...)
		case opFlush:
			implied(i)
			out.flushed = true
			err = out.rec.FlushError()
		}
		if err != nil && out.err == nil {
			out.err = err
		}
	}
	return out
}

func FuzzRecorder(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{10, 0, opWrite, 5, 0})
	f.Add([]byte{10, 0, opFinal, 1, opCopy, 200, 9})
	f.Add([]byte{255, 1, opFinal, 1, opReadFrom, 20, 0, opReadFrom, 255, 9})
	f.Add([]byte{0, 0, opInformational, 2, opInformational, 0, opFinal, 5, opWrite, 0, 0})
	f.Add([]byte{100, 0, opWrite, 50, 0, opFlush, opWrite, 100, 0, opFinal, 3})
	f.Add([]byte{3, 1, opReadFrom, 200, 8, opFinal, 9, opCopy, 10, 4, opFlush})
	f.Add([]byte{1, 0, opFlush, opFinal, 2})

	outcomes := make(chan fuzzOutcome, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		outcomes <- runFuzzOps(w, r)
	}))
	f.Cleanup(srv.Close)
	client := srv.Client()

	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := client.Post(srv.URL, "application/octet-stream", bytes.NewReader(data))
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())

		var out fuzzOutcome
		select {
		case out = <-outcomes:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "handler did not return")
		}
		require.NoError(t, out.err)
		rec := out.rec

		require.True(t, bytes.Equal(out.body, got), "client got %d bytes, handler wrote %d", len(got), len(out.body))
		require.Equal(t, int64(len(got)), rec.Written())
		require.Equal(t, out.status, rec.Status())
		if out.status == 0 {
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Nil(t, rec.HeaderSnapshot())
		} else {
			require.Equal(t, out.status, resp.StatusCode)
			require.Equal(t, strconv.Itoa(out.step), rec.HeaderSnapshot().Get("X-Step"))
			require.Equal(t, rec.HeaderSnapshot().Get("X-Step"), resp.Header.Get("X-Step"))
		}
		require.Equal(t, len(got) > out.limit, rec.Overflowed())
		require.Equal(t, out.flushed, rec.Flushed())
		require.False(t, rec.Hijacked())
		require.Equal(t, !rec.Overflowed() && !out.flushed, rec.Replayable())
		if !rec.Overflowed() {
			require.True(t, bytes.Equal(got, rec.Body()), "kept copy differs from what the client got")
		} else {
			require.Nil(t, rec.Body())
		}
	})
}
