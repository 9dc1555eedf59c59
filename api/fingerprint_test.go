package api

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
)

// TestFingerprintRoundTrip: a fingerprint with every field set (by
// reflection, so that a field added to the format is set too) comes back
// from the wire whole, through protobuf's bytes: a field NodeFingerprint
// does not carry fails it.
func TestFingerprintRoundTrip(t *testing.T) {
	var f NodeInfo
	fill(reflect.ValueOf(&f).Elem(), "f")
	data, err := proto.Marshal(FingerprintWire(f))
	if err != nil {
		t.Fatal(err)
	}
	var m stasisv1.NodeFingerprint
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if got := FingerprintFromWire(&m); !reflect.DeepEqual(got, f) {
		t.Fatalf("the fingerprint changed on the wire:\n got %+v\nwant %+v", got, f)
	}
}

// fill sets every exported field under v to a value of its own (derived
// from its path), slices to one element.
func fill(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(len(path)) << 33)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(1_700_000_000, int64(len(path))).UTC()))
			return
		}
		for i := range v.NumField() {
			if field := v.Type().Field(i); field.IsExported() {
				fill(v.Field(i), path+"."+field.Name)
			}
		}
	default:
		panic("fill: a field of kind " + v.Kind().String() + " at " + path + ": teach fill it")
	}
}
