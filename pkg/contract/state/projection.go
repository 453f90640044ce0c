package state

import (
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
)

// legacySecrets are the attributes earlier versions put runner secrets in, sealed with KMS: the
// registration token (and its expiry), a just-in-time configuration, a remove token. Nothing
// writes them now: secrets ride the doorbell (package doorbell, design §5a). Every claim, every
// transition that clears the assignment or reaches running, and every termination removes them
// from items written before, and no control-plane read asks for them.
var legacySecrets = []string{"regToken", "regTokenExpiresAt", "jitConfig", "removeToken"}

// readProjection is every attribute of an item, for control-plane reads (named, so that nothing
// else an item may hold is read).
var readProjection = projection(reflect.TypeFor[Instance](), legacySecrets)

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
