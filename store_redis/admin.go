package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency/store"
)

var _ store.Admin = (*Store)(nil)

// Inspect implements store.Admin in one script run. A record in flight
// comes with its steps; a tombstone (WithTombstones) is a StateExpired
// record.
func (s *Store) Inspect(ctx context.Context, hash string) (store.Record, bool, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: inspect: %w", err)
	}
	rec, found, err := s.inspect(ctx, hash)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("redisstore: inspect: %w", err)
	}
	return rec, found, nil
}

func (s *Store) inspect(ctx context.Context, hash string) (store.Record, bool, error) {
	v, err := inspectScript.Run(ctx, s.client, s.hashKeys(hash)).Slice()
	if err != nil || len(v) == 0 {
		return store.Record{}, false, err
	}
	r := reply{v: v}
	state, fp, fence, left := store.State(r.int(0)), r.str(1), r.int(2), time.Duration(r.int(3))*time.Millisecond
	switch state {
	case store.StateExpired:
		rec, err := tombstone(fp, fence, left, r.str(6))
		return rec, true, errors.Join(r.err(), err)
	case store.StateInFlight:
		rec, _ := foundRecord(state, fp, fence, left, 0, "", "")
		steps, err := decodeSteps(r.str(6))
		rec.Steps = steps
		return rec, true, errors.Join(r.err(), err)
	}
	status, serr := strconv.Atoi(r.str(4))
	rec, herr := foundRecord(state, fp, fence, left, status, r.str(5), r.str(6))
	return rec, true, errors.Join(r.err(), serr, herr)
}

// Delete implements store.Admin in one script run. A record in flight is
// kept as Release leaves it, so that the next claim gets the next fence.
func (s *Store) Delete(ctx context.Context, hash string, force bool) (bool, error) {
	if err := store.CheckHash(hash, false); err != nil {
		return false, fmt.Errorf("redisstore: delete: %w", err)
	}
	forced := 0
	if force {
		forced = 1
	}
	r, err := s.replication(ctx)
	if err != nil {
		return false, fmt.Errorf("redisstore: delete: %w", err)
	}
	cmd, acks := s.eval(ctx, r, deleteScript, s.hashKeys(hash), forced)
	deleted, err := cmd.Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("redisstore: delete: %w", err)
	case deleted == 2:
		return false, store.ErrLeaseLive
	}
	return deleted == 1, r.acked("delete", acks)
}

// Find implements store.Admin: SCAN on every master, each key it matches
// then read as Inspect reads it. A tombstone's key counts once its record
// is gone.
func (s *Store) Find(ctx context.Context, prefix string, limit int) ([]string, error) {
	if err := store.CheckHash(prefix, true); err != nil {
		return nil, fmt.Errorf("redisstore: find: %w", err)
	}
	f := finder{store: s, limit: limit, match: escapeGlob(s.prefix) + "{" + prefix + "*"}
	onNode := func(ctx context.Context, node *redis.Client) error { return f.scan(ctx, node) }
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, onNode)
	case *redis.Ring:
		err = c.ForEachShard(ctx, onNode)
	default:
		err = f.scan(ctx, s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: find: %w", err)
	}
	return f.found, nil
}

// finder collects the live records one Find scans for, from one or many
// nodes at once.
type finder struct {
	store *Store
	limit int
	match string

	mu    sync.Mutex
	found []string
}

// scan adds the live records on node whose keys match f.match until f
// has its limit.
func (f *finder) scan(ctx context.Context, node redis.Cmdable) error {
	iter := node.Scan(ctx, 0, f.match, 1000).Iterator()
	for !f.full() && iter.Next(ctx) {
		hash, tomb, ok := f.hashOf(iter.Val())
		if !ok {
			continue
		}
		rec, live, err := f.store.inspect(ctx, hash)
		if err != nil {
			return err
		}
		if live && tomb == (rec.State == store.StateExpired) { // a hash with both keys is added once
			f.add(hash)
		}
	}
	return iter.Err()
}

// hashOf returns the hash a record's or a tombstone's key holds, and
// whether it is a tombstone's, or false for a key of another shape.
func (f *finder) hashOf(key string) (hash string, tomb, ok bool) {
	hash, ok = strings.CutPrefix(key, f.store.prefix+"{")
	hash, tomb = strings.CutSuffix(hash, "}"+tombSuffix)
	hash, closed := strings.CutSuffix(hash, "}")
	return hash, tomb, ok && (tomb || closed) && store.CheckHash(hash, false) == nil
}

func (f *finder) full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.found) >= f.limit
}

func (f *finder) add(hash string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.found) < f.limit {
		f.found = append(f.found, hash)
	}
}

// escapeGlob returns s as a SCAN MATCH pattern that matches s alone.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
