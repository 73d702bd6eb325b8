package grpcidempotency

import (
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// reply is a call's recorded outcome: its response message or its error
// status, and the metadata its handler set.
type reply struct {
	message proto.Message // nil with a status
	status  *spb.Status   // nil for OK
	header  metadata.MD
	trailer metadata.MD
}

// The fields of a stored reply, each of the bytes wire type. Records
// outlive a deploy, so the numbers never change; unknown ones are skipped.
const (
	fieldType    protowire.Number = 1 // the message's full name
	fieldMessage protowire.Number = 2
	fieldStatus  protowire.Number = 3 // a google.rpc.Status
	fieldHeader  protowire.Number = 4 // one metadata entry each
	fieldTrailer protowire.Number = 5

	fieldEntryKey   protowire.Number = 1
	fieldEntryValue protowire.Number = 2
)

// encodeReply encodes the handler's outcome: resp if err is nil, else
// err's status.
func encodeReply(resp any, err error, header, trailer metadata.MD) ([]byte, error) {
	var b []byte
	if err != nil {
		st, merr := proto.Marshal(status.Convert(err).Proto())
		if merr != nil {
			return nil, merr
		}
		b = appendField(b, fieldStatus, st)
	} else {
		msg, ok := resp.(proto.Message)
		if !ok {
			return nil, fmt.Errorf("grpcidempotency: the reply is a %T, not a proto.Message", resp)
		}
		body, merr := proto.Marshal(msg)
		if merr != nil {
			return nil, merr
		}
		b = appendField(b, fieldType, []byte(msg.ProtoReflect().Descriptor().FullName()))
		b = appendField(b, fieldMessage, body)
	}
	b = appendMetadata(b, fieldHeader, header)
	return appendMetadata(b, fieldTrailer, trailer), nil
}

func appendField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendMetadata(b []byte, num protowire.Number, md metadata.MD) []byte {
	var entry []byte
	for k, values := range md {
		for _, v := range values {
			entry = appendField(entry[:0], fieldEntryKey, []byte(k))
			entry = appendField(entry, fieldEntryValue, []byte(v))
			b = appendField(b, num, entry)
		}
	}
	return b
}

// decodeReply decodes what encodeReply wrote; the message's type must be in
// protoregistry.GlobalTypes, as every generated type is.
func decodeReply(b []byte) (reply, error) {
	var r reply
	var typeName, body []byte
	err := consumeFields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldType:
			typeName = v
		case fieldMessage:
			body = v
		case fieldStatus:
			r.status = new(spb.Status)
			return proto.Unmarshal(v, r.status)
		case fieldHeader:
			return consumeEntry(&r.header, v)
		case fieldTrailer:
			return consumeEntry(&r.trailer, v)
		}
		return nil
	})
	if err != nil || r.status != nil {
		return r, err
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName))
	if err != nil {
		return r, fmt.Errorf("grpcidempotency: the stored reply's type %q: %w", typeName, err)
	}
	r.message = mt.New().Interface()
	return r, proto.Unmarshal(body, r.message)
}

func consumeEntry(md *metadata.MD, b []byte) error {
	var key, value []byte
	err := consumeFields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldEntryKey:
			key = v
		case fieldEntryValue:
			value = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *md == nil {
		*md = metadata.MD{}
	}
	(*md)[string(key)] = append((*md)[string(key)], string(value))
	return nil
}

// consumeFields calls field with each bytes field of b, in order.
func consumeFields(b []byte, field func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if typ != protowire.BytesType {
			return errors.New("grpcidempotency: a stored reply's field is not bytes")
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[n+m:]
		if err := field(num, v); err != nil {
			return err
		}
	}
	return nil
}
