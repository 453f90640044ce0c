package state

import (
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
)

// secretAttrs are the attributes the control plane writes but never needs to read back: the
// sealed runner tokens and just-in-time configurations. Control-plane reads leave them out (readProjection); only the agent
// reads them, from its own item.
var secretAttrs = []string{"regToken", "jitConfig", legacyRemoveToken}

// legacyRemoveToken is the attribute earlier versions put a sealed runner remove token in, when a
// run let the instance go. Nothing writes it now: every transition that clears the assignment, or
// terminates the instance, removes it from items written before.
const legacyRemoveToken = "removeToken"

// readProjection is every attribute of an item but the secrets, for control-plane reads.
var readProjection = projection(reflect.TypeFor[Instance](), secretAttrs)

// projection lists the attribute names of t's fields (embedded structs flattened) but skip.
func projection(t reflect.Type, skip []string) expression.ProjectionBuilder {
	var names []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("dynamodbav"), ",")
			if name != "" && name != "-" && !slices.Contains(skip, name) {
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
