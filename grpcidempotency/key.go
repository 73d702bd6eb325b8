package grpcidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// KeyMetadata is the metadata that carries a call's idempotency key.
const KeyMetadata = "idempotency-key"

// maxKeyBytes is the longest key, as for the Idempotency-Key header.
const maxKeyBytes = 255

// key returns the call's key: the request's key field if set, else the
// metadata's; "" if it has none. A malformed key is InvalidArgument.
func (c *config) key(ctx context.Context, req proto.Message) (string, error) {
	if key, ok := fieldKey(req, c.keyField); ok {
		return checkKey(key)
	}
	switch values := metadata.ValueFromIncomingContext(ctx, KeyMetadata); len(values) {
	case 0:
		return "", nil
	case 1:
		return checkKey(values[0])
	default:
		return "", status.Error(codes.InvalidArgument, "more than one idempotency-key")
	}
}

// fieldKey returns req's singular string field name, if set.
func fieldKey(req proto.Message, name protoreflect.Name) (string, bool) {
	if name == "" {
		return "", false
	}
	m := req.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated || !m.Has(fd) {
		return "", false
	}
	return m.Get(fd).String(), true
}

// checkKey accepts 1 to 255 bytes of printable ASCII.
func checkKey(key string) (string, error) {
	if key == "" || len(key) > maxKeyBytes {
		return "", status.Error(codes.InvalidArgument, "an idempotency key is 1 to 255 bytes")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", status.Error(codes.InvalidArgument, "an idempotency key is printable ASCII")
		}
	}
	return key, nil
}

// doScope is the scope given to idempotency.Do: the call's scope and
// method, length-prefixed so no two pairs collide. Stores keep it, so it
// must never change.
func doScope(scope, fullMethod string) string {
	buf := make([]byte, 0, 2*binary.MaxVarintLen16+len(scope)+len(fullMethod))
	buf = binary.AppendUvarint(buf, uint64(len(scope)))
	buf = append(buf, scope...)
	buf = binary.AppendUvarint(buf, uint64(len(fullMethod)))
	return string(append(buf, fullMethod...))
}

// fingerprint hashes the full method and req marshalled deterministically.
func fingerprint(fullMethod string, req proto.Message) (string, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(fullMethod))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)), nil
}
