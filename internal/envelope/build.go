package envelope

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Build is the JSON object of an event that a component other than the
// edge writes (the bridge, for a client's typing): each value at its RFC
// 6901 pointer, the objects on the way created. Pointers come from the
// catalogue, so an event built here is read back by the same pointers
// Extract and Lookup use. Two pointers where one is inside the other's
// value are an error.
func Build(fields map[string]any) ([]byte, error) {
	root := object{}
	for pointer, value := range fields {
		if !strings.HasPrefix(pointer, "/") {
			return nil, fmt.Errorf("%q is not a JSON pointer", pointer)
		}
		tokens := strings.Split(pointer[1:], "/")
		obj := root
		for i, token := range tokens {
			token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
			if i == len(tokens)-1 {
				if _, taken := obj[token]; taken {
					return nil, fmt.Errorf("%q is set twice", pointer)
				}
				obj[token] = value
				break
			}
			// Only the objects made on the way are gone into: a value
			// given, even an object, is another field's, whichever of the
			// two pointers comes first.
			next, ok := obj[token].(object)
			if !ok {
				if _, taken := obj[token]; taken {
					return nil, fmt.Errorf("%q is inside another field's value", pointer)
				}
				next = object{}
				obj[token] = next
			}
			obj = next
		}
	}
	return json.Marshal(root)
}

// object is a JSON object Build makes on the way to a pointer's value.
type object map[string]any
