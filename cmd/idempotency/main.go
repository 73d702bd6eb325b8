// Command idempotency finds, inspects and deletes the records of the
// idempotency middleware and of Do in a shared store (Redis, PostgreSQL or
// SQLite), for the people who run a service that uses them.
//
//	idempotency inspect -store redis -url redis://host:6379/0 -scope acct_1 -route /payments -key k-1
//	idempotency delete  -store postgres -url postgres://host/db -hash 3f1c9a0b2d4e5f60
//	idempotency migrate -store redis -url redis://host:6379/0 -to-store postgres -to-url postgres://host/db
//
// inspect prints the record as one JSON object; delete removes it, and
// refuses a record in flight under a live lease unless -force. The exit
// status is 0 when the record was found (or deleted), 3 when there is
// none, 1 on an error and 2 on a usage error. migrate counts the records
// that the store being moved from still holds and the one being moved to
// lacks, exiting 0 when there are none and 3 while there are.
// docs/operations.md and docs/migrating.md are the manual.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
