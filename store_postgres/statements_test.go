package pgstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatementsUseQuotedNames(t *testing.T) {
	st := newStatements(`"s"."t"`, `"s"."t_expires_idx"`)
	for _, sql := range []string{st.schema, st.upgrade, st.claim, st.renew, st.complete, st.release, st.deleteExpired, st.pages,
		st.channel, st.watchLock, st.watchState, st.unwatch} {
		assert.NotContains(t, sql, DefaultTable)
		assert.Contains(t, sql, `"s"."t"`)
	}
	assert.Contains(t, st.upgrade, `DROP INDEX IF EXISTS "s"."t_expires_idx"`)
}
