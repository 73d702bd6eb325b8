package mysqlstore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		err      error
		says     string
		resendOn bool
	}{
		{&mysql.MySQLError{Number: errTableAccessDenied}, "the user lacks a privilege", false},
		{&mysql.MySQLError{Number: errRoutineAccessDenied}, "the user lacks a privilege", false},
		{&mysql.MySQLError{Number: errNoSuchProcedure}, "run Migrate", false},
		{mysql.ErrInvalidConn, "invalid connection: unexpected EOF", true},
		{driver.ErrBadConn, "bad connection: unexpected EOF", true},
		{errors.New("other"), "other", false},
	} {
		got := explain(tc.err)
		require.ErrorIs(t, got, tc.err)
		require.ErrorContains(t, got, tc.says)
		require.Equal(t, tc.resendOn, errors.Is(got, io.ErrUnexpectedEOF), "%v", tc.err)
	}
	require.NoError(t, explain(nil))
	require.True(t, isDeadlock(fmt.Errorf("batch: %w", &mysql.MySQLError{Number: errDeadlock})))
	require.False(t, isDeadlock(&mysql.MySQLError{Number: errTableAccessDenied}))
}
