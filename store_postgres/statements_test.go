package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestStatementsUseQuotedNames(t *testing.T) {
	st := newStatements(`"s"."t"`, time.Second)
	for _, sql := range []string{st.migrations[0], st.migrations[1], st.migrations[2], st.migrations[3], st.claimNew, st.claimLive, st.claim, st.renew, st.complete, st.completed, st.release, st.saveStep, st.deleteExpired, st.pages,
		st.channel, st.watchLock, st.watchState, st.unwatch, st.inspect, st.deleteLock, st.deleteDone, st.deleteInFlight, st.find} {
		assert.NotContains(t, sql, DefaultTable)
		assert.Contains(t, sql, `"s"."t"`)
		assert.NotContains(t, sql, tombstoneTimeSQL)
	}
}
