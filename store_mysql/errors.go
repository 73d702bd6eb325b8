package mysqlstore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/go-sql-driver/mysql"
)

// Server errors that name a missing privilege or object.
const (
	errDBAccessDenied      = 1044
	errTableAccessDenied   = 1142
	errColumnAccessDenied  = 1143
	errRoutineAccessDenied = 1370
	errNoSuchTable         = 1146
	errNoSuchProcedure     = 1305
	errDeadlock            = 1213
)

// isDeadlock reports whether err is a deadlock, after which the server
// has rolled the transaction back.
func isDeadlock(err error) bool {
	var serverErr *mysql.MySQLError
	return errors.As(err, &serverErr) && serverErr.Number == errDeadlock
}

// explain adds to err what the caller can do about it. A connection lost
// mid-statement also wraps io.ErrUnexpectedEOF, on which the middleware
// sends an outcome call again.
func explain(err error) error {
	var serverErr *mysql.MySQLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &serverErr):
		switch serverErr.Number {
		case errDBAccessDenied, errTableAccessDenied, errColumnAccessDenied, errRoutineAccessDenied:
			return fmt.Errorf("%w (the user lacks a privilege the store needs: see docs/mysql.md)", err)
		case errNoSuchTable, errNoSuchProcedure:
			return fmt.Errorf("%w (run Migrate)", err)
		}
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn):
		return fmt.Errorf("%w: %w", err, io.ErrUnexpectedEOF)
	}
	return err
}
