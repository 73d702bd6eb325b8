package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestInspectAJob: a job's record is found by its key, its result shown as
// text, or in base64 when it is not UTF-8.
func TestInspectAJob(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for job, result := range map[string]string{"text": "done", "binary": "\xff\xfe"} {
			_, err := idempotency.Do(t.Context(), tg.store, job, func(context.Context) ([]byte, error) { return []byte(result), nil })
			require.NoError(t, err)
		}
		out := runCmd(tg, "inspect", "-job", "text").json(t)
		require.Equal(t, "completed", out["state"])
		require.EqualValues(t, 200, out["status"])
		require.Equal(t, "done", out["body"])
		out = runCmd(tg, "inspect", "-job", "binary").json(t)
		require.Equal(t, "//4=", out["body_base64"])
		require.NotContains(t, out, "body")
	})
}
