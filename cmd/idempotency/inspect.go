package main

import (
	"context"
	"unicode/utf8"

	"github.com/seed43327c4c/idempotency/store"
)

// inspect reports the record filed under hash in out: its state (absent
// when there is none), fence and ttl_ms, and a completed record's status,
// header and body, as text when it is valid UTF-8, else in body_base64.
func inspect(ctx context.Context, s store.Admin, hash string, found bool, out map[string]any) error {
	var rec store.Record
	if found {
		var err error
		if rec, found, err = s.Inspect(ctx, hash); err != nil {
			return err
		}
	}
	if !found {
		out["state"] = "absent"
		return nil
	}
	out["state"] = rec.State.String()
	out["fence"] = rec.Owner.Fence
	out["ttl_ms"] = rec.TTL.Milliseconds()
	if resp := rec.Response; resp != nil {
		out["status"] = resp.Status
		out["header"] = resp.Header
		if utf8.Valid(resp.Body) {
			out["body"] = string(resp.Body)
		} else {
			out["body_base64"] = resp.Body // JSON writes bytes in base64
		}
	}
	return nil
}
