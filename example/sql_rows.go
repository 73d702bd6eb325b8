package main

import (
	"context"
	"database/sql"
)

// queryAll runs query on db and scans each row into a T through the
// pointers fields returns for it; no rows give an empty slice.
func queryAll[T any](ctx context.Context, db *sql.DB, fields func(*T) []any, query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	all := []T{}
	for rows.Next() {
		var v T
		if err := rows.Scan(fields(&v)...); err != nil {
			return nil, err
		}
		all = append(all, v)
	}
	return all, rows.Err()
}

func paymentFields(p *payment) []any { return []any{&p.ID, &p.Amount, &p.Currency} }

func eventFields(e *eventCount) []any { return []any{&e.ID, &e.Count} }
