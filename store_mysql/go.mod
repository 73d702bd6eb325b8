module github.com/seed43327c4c/idempotency/store_mysql

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/seed43327c4c/idempotency v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/seed43327c4c/idempotency => ../
