module github.com/seed43327c4c/idempotency/grpcidempotency

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seed43327c4c/idempotency v0.0.0-00010101000000-000000000000
	github.com/seed43327c4c/idempotency/store_redis v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/seed43327c4c/idempotency => ../
	github.com/seed43327c4c/idempotency/store_redis => ../store_redis
)
