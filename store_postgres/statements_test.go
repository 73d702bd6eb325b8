package pgstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatementsUseQuotedNames(t *testing.T) {
	st := newStatements(`"s"."t"`, `"t_expires_idx"`)
	for _, sql := range []string{st.schema, st.claim, st.renew, st.complete, st.release, st.deleteExpired} {
		assert.NotContains(t, sql, DefaultTable)
		assert.Contains(t, sql, `"s"."t"`)
	}
	assert.Contains(t, st.schema, `INDEX IF NOT EXISTS "t_expires_idx" ON "s"."t" (expires_at)`)
}
