module github.com/seed43327c4c/idempotency/cmd/idempotency

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/jackc/pgx/v5 v5.12.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seed43327c4c/idempotency v0.0.0-00010101000000-000000000000
	github.com/seed43327c4c/idempotency/store_mysql v0.0.0-00010101000000-000000000000
	github.com/seed43327c4c/idempotency/store_postgres v0.0.0-00010101000000-000000000000
	github.com/seed43327c4c/idempotency/store_redis v0.0.0-00010101000000-000000000000
	github.com/seed43327c4c/idempotency/store_sqlite v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)

replace (
	github.com/seed43327c4c/idempotency => ../../
	github.com/seed43327c4c/idempotency/store_mysql => ../../store_mysql
	github.com/seed43327c4c/idempotency/store_postgres => ../../store_postgres
	github.com/seed43327c4c/idempotency/store_redis => ../../store_redis
	github.com/seed43327c4c/idempotency/store_sqlite => ../../store_sqlite
)
