package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEmailSentOnce(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	body := `{"to": "ada@example.com", "subject": "Your receipt"}`
	first := ta.post(t, "/emails", "mail-1", body)
	require.Equal(t, http.StatusAccepted, first.status, first.body)
	assert.JSONEq(t, `{"status":"sent","to":"ada@example.com","subject":"Your receipt"}`, first.body)
	again := ta.post(t, "/emails", "mail-1", body)
	assert.Equal(t, first.status, again.status)
	assert.Equal(t, first.body, again.body)
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	assert.Equal(t, 1, strings.Count(ta.logs.String(), `msg="email sent"`))

	bad := ta.post(t, "/emails", "mail-2", `{"to": "nobody", "subject": ""}`)
	assert.Equal(t, http.StatusBadRequest, bad.status)
	assert.Equal(t, 1, strings.Count(ta.logs.String(), `msg="email sent"`))
}
