package sqlitestore

// A helper process: this test binary, run again with helperEnv set to a
// database file, serves a Store on that file to its parent over net/rpc on
// its stdin and stdout, so that a test can race two real processes on one
// file.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// helperEnv names the database file a helper process serves.
const helperEnv = "SQLITESTORE_TEST_HELPER_FILE"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		os.Exit(serveHelper(path))
	}
	if path := os.Getenv(stormEnv); path != "" {
		if err := stormWorker(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(benchEnv); spec != "" {
		if err := benchProcess(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveHelper serves a Store on path until its parent closes stdin.
func serveHelper(path string) int {
	db, err := Open(context.Background(), path, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	srv := rpc.NewServer()
	if err := srv.Register(&Helper{s: NewTx(db, WithTxLease(helperTxLease))}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv.ServeConn(stdio{})
	return 0
}

// stdio is this process's stdin and stdout as one connection.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error                { return nil }

// helperTxLease is the lease of a helper process's transactional claims.
const helperTxLease = 2 * time.Second

// Helper is the RPC service of a helper process: one method per Store
// method, and requests in transactional mode (see runTx).
type Helper struct{ s *TxStore }

// Call is one Store call sent to a helper process.
type Call struct {
	Key, Fingerprint, Token string
	Owner                   store.Lease
	Lease                   time.Duration
	Resp                    *store.Response
}

// Reply is a helper process's answer; Err is the error's text, and
// NotOwner or EmptyToken tell the sentinel it matched.
type Reply struct {
	Rec                  store.Record
	Claimed              bool
	Err                  string
	NotOwner, EmptyToken bool
}

func (r *Reply) set(err error) {
	if err != nil {
		r.Err = err.Error()
		r.NotOwner = errors.Is(err, store.ErrNotOwner)
		r.EmptyToken = errors.Is(err, store.ErrEmptyToken)
	}
}

func (h *Helper) Claim(c Call, r *Reply) error {
	var err error
	r.Rec, r.Claimed, err = h.s.Claim(context.Background(), c.Key, c.Fingerprint, c.Token, c.Lease)
	r.set(err)
	return nil
}

func (h *Helper) Renew(c Call, r *Reply) error {
	r.set(h.s.Renew(context.Background(), c.Key, c.Owner, c.Lease))
	return nil
}

func (h *Helper) Complete(c Call, r *Reply) error {
	r.set(h.s.Complete(context.Background(), c.Key, c.Owner, c.Resp, c.Lease))
	return nil
}

func (h *Helper) Release(c Call, r *Reply) error {
	r.set(h.s.Release(context.Background(), c.Key, c.Owner))
	return nil
}

// TxRun runs a request in transactional mode on c.Key, committed, as run
// c.Token (see runTx).
func (h *Helper) TxRun(c Call, r *Reply) error {
	var err error
	r.Claimed, err = runTx(context.Background(), h.s, c.Key, c.Token, true)
	r.set(err)
	return nil
}

// TxHold runs a request as TxRun does, short of its commit: its
// transaction stays open, holding the file's write lock.
func (h *Helper) TxHold(c Call, r *Reply) error {
	var err error
	r.Claimed, err = runTx(context.Background(), h.s, c.Key, c.Token, false)
	r.set(err)
	return nil
}

// helperStore is a store.Store served by a helper process.
type helperStore struct {
	client *rpc.Client
	cmd    *exec.Cmd
}

// startHelper starts a helper process serving path, stopped when the test
// ends.
func startHelper(t *testing.T, path string) *helperStore {
	t.Helper()
	h := spawnHelper(t, path)
	t.Cleanup(func() {
		_ = h.client.Close()
		require.NoError(t, h.cmd.Wait(), "helper process")
	})
	return h
}

// spawnHelper starts a helper process serving path; the caller ends it.
func spawnHelper(t *testing.T, path string) *helperStore {
	t.Helper()
	cmd, stdin, stdout := startChild(t, helperEnv+"="+path)
	return &helperStore{client: rpc.NewClient(pipes{stdout, stdin}), cmd: cmd}
}

// kill SIGKILLs the helper process and waits for it to exit.
func (h *helperStore) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, h.cmd.Process.Kill())
	_ = h.cmd.Wait()
	_ = h.client.Close()
}

// runTx runs c.Key's request in the helper process (see Helper.TxRun), or
// only holds it open if hold.
func (h *helperStore) runTx(key, run string, hold bool) (claimed bool, err error) {
	method := "TxRun"
	if hold {
		method = "TxHold"
	}
	r, err := h.call(method, Call{Key: key, Token: run})
	return r.Claimed, err
}

// pipes is a child process's stdout and stdin as one connection.
type pipes struct {
	io.ReadCloser
	io.WriteCloser
}

func (p pipes) Close() error { return errors.Join(p.WriteCloser.Close(), p.ReadCloser.Close()) }

func (h *helperStore) call(method string, c Call) (Reply, error) {
	var r Reply
	if err := h.client.Call("Helper."+method, c, &r); err != nil {
		return r, err
	}
	switch {
	case r.NotOwner:
		return r, fmt.Errorf("%s (helper process): %w", r.Err, store.ErrNotOwner)
	case r.EmptyToken:
		return r, fmt.Errorf("%s (helper process): %w", r.Err, store.ErrEmptyToken)
	case r.Err != "":
		return r, fmt.Errorf("%s (helper process)", r.Err)
	}
	return r, nil
}

func (h *helperStore) Claim(_ context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	r, err := h.call("Claim", Call{Key: key, Fingerprint: fingerprint, Token: token, Lease: lease})
	return r.Rec, r.Claimed, err
}

func (h *helperStore) Renew(_ context.Context, key string, owner store.Lease, lease time.Duration) error {
	_, err := h.call("Renew", Call{Key: key, Owner: owner, Lease: lease})
	return err
}

func (h *helperStore) Complete(_ context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	_, err := h.call("Complete", Call{Key: key, Owner: owner, Resp: resp, Lease: retention})
	return err
}

func (h *helperStore) Release(_ context.Context, key string, owner store.Lease) error {
	_, err := h.call("Release", Call{Key: key, Owner: owner})
	return err
}

// startChild starts this test binary again, with env ("NAME=value") added
// to its environment and its standard error the test's, and returns it
// with a pipe to its standard input and one from its standard output.
func startChild(t testing.TB, env string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd = exec.Command(exe)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err = cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd, stdin, stdout
}
