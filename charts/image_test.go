package charts

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// imageScript is the script that builds and tags the image.
const imageScript = "../scripts/image.sh"

// scriptVar is the value of a plain NAME=value line of the image script.
func scriptVar(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(imageScript)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s sets no %s", imageScript, name)
	}
	return string(m[1])
}

// The chart runs, by default, the image `go tool task image` builds: the
// repository the script tags, at the chart's appVersion, as the image's
// own user.
func TestDefaultImageIsTheBuiltOne(t *testing.T) {
	uid, err := strconv.ParseInt(scriptVar(t, "IMAGE_UID"), 10, 64)
	if err != nil {
		t.Fatalf("%s: IMAGE_UID: %v", imageScript, err)
	}
	want := scriptVar(t, "REPO") + ":" + loadChart(t).Metadata.AppVersion
	r := render(t, nil)
	specs := map[string]*corev1.PodSpec{}
	for owner, pod := range r.podTemplates() {
		specs[owner] = &pod.Spec
	}
	for _, pod := range r.pods { // the `helm test` pod
		specs["Pod/"+pod.Name] = &pod.Spec
	}
	if len(specs) == 0 {
		t.Fatal("no pods rendered")
	}
	for owner, spec := range specs {
		for _, c := range allContainers(spec) {
			if c.Image != want {
				t.Errorf("%s container %s runs %s, want %s", owner, c.Name, c.Image, want)
			}
			if sc := c.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != uid {
				t.Errorf("%s container %s does not run as the image's user %d", owner, c.Name, uid)
			}
		}
	}
}
