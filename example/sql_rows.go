package main

import (
	"context"
	"database/sql"
	"fmt"
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

// listTally returns every id of t with its count, ordered by id; t's name,
// one of the tallies, is the table, never input.
func listTally(ctx context.Context, db *sql.DB, t tally) ([]eventCount, error) {
	counts, err := queryAll(ctx, db, eventFields, `SELECT id, count FROM `+t.name+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.name, err)
	}
	return counts, nil
}
