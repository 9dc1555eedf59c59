package agent

import (
	"encoding/json"
	"reflect"
	"testing"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestEveryTemplateFieldReachesStasisd: every field of an ActorTemplate's
// spec, each set by reflection (so that a field added later is set too),
// reaches stasisd's template with its value under the same JSON name, but
// the two the fleet keeps (golden, a port's name) and the network mode
// (a string in the CRD, the mode of stasisd's network).
func TestEveryTemplateFieldReachesStasisd(t *testing.T) {
	var spec stasisv1alpha1.ActorTemplateSpec
	fill(reflect.ValueOf(&spec).Elem())
	want := asJSON(t, spec)
	delete(want, "golden")
	for _, p := range want["ports"].([]any) {
		delete(p.(map[string]any), "name")
	}
	want["network"] = map[string]any{"mode": want["network"]}
	got := asJSON(t, stasisdTemplate("t1", spec))
	for key, v := range want {
		if !reflect.DeepEqual(got[key], v) {
			t.Errorf("%s: stasisd's template has %v, the ActorTemplate %v", key, got[key], v)
		}
	}
	if got["name"] != "t1" {
		t.Errorf("stasisd's template is named %v, want t1", got["name"])
	}
}

// fill sets every field under v to a value other than its zero: strings
// to "s", numbers to 7, one element in each slice and map, a pointer to a
// filled value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	default:
		panic("fill: no value for a " + v.Kind().String())
	}
}

func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
