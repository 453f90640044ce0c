package state

import (
	"reflect"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
)

// readProjection is every attribute of an item, for control-plane reads (named, so that nothing
// else an item may hold is read).
var readProjection = projection(reflect.TypeFor[Instance]())

// projection lists the attribute names of t's fields (embedded structs flattened).
func projection(t reflect.Type) expression.ProjectionBuilder {
	var names []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("dynamodbav"), ",")
			if name != "" && name != "-" {
				names = append(names, name)
			}
		}
	}
	walk(t)
	b := expression.NamesList(expression.Name(names[0]))
	for _, n := range names[1:] {
		b = b.AddNames(expression.Name(n))
	}
	return b
}
