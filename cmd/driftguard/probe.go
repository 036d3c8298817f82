package main

// `driftguard probe`: the check the Helm chart's `helm test` pod runs with
// the driftguard image itself, which has no shell, curl or openssl. It signs
// and posts one webhook as a publisher would, then reads /readyz of each
// component; any answer but the expected one is a failure and a non-zero
// exit.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// probeFlags defines probe's flags. It loads no configuration: it is a
// client of the running components, given their URLs.
func probeFlags(fs *flag.FlagSet) runner {
	base := fs.String("webhook", "", "ingest's base URL (http://host:port): sign --body and POST it to /v1/webhooks/<stream>, expecting 202")
	stream := fs.String("stream", "", "the stream of the webhook")
	secretEnv := fs.String("secret-env", "", "the variable holding the stream's secrets (the first signs); default DRIFTGUARD_SECRETS_<STREAM>")
	scheme := fs.String("scheme", "", "the stream's signature scheme (standard-webhooks, hmac-sha256-hex, github); default standard-webhooks")
	body := fs.String("body", "", "the webhook's JSON body, valid for the stream's schema")
	timeout := fs.Duration("timeout", 10*time.Second, "how long each request may take")
	var ready []string
	fs.Func("ready", "a /readyz URL that must answer 200 (repeat for each component)", func(u string) error {
		ready = append(ready, u)
		return nil
	})
	return func(ctx context.Context, env *environment) error {
		if *base == "" && len(ready) == 0 {
			return usageError{errors.New("nothing to probe: give --webhook or --ready")}
		}
		client := &http.Client{Timeout: *timeout}
		var failed []string
		if *base != "" {
			if *stream == "" || *body == "" {
				return usageError{errors.New("--webhook needs --stream and --body")}
			}
			name := *secretEnv
			if name == "" {
				name = config.SecretsVariable(*stream)
			}
			secrets := config.SplitList(os.Getenv(name))
			if len(secrets) == 0 {
				return usageError{fmt.Errorf("--secret-env: %s holds no secret", name)}
			}
			signer, err := webhook.NewSigner(*scheme, secrets[0])
			if err != nil {
				return usageError{fmt.Errorf("--secret-env %s: %w", name, err)}
			}
			url := strings.TrimSuffix(*base, "/") + "/v1/webhooks/" + *stream
			id := fmt.Sprintf("driftguard-probe-%d", time.Now().UnixNano())
			if err := probeWebhook(ctx, client, signer, url, id, []byte(*body), env.stdout); err != nil {
				failed = append(failed, err.Error())
			}
		}
		for _, u := range ready {
			if err := probeReady(ctx, client, u, env.stdout); err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of the checks failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
		}
		return nil
	}
}

// probeWebhook posts one signed webhook and wants 202.
func probeWebhook(ctx context.Context, client *http.Client, signer *webhook.Signer, url, id string, body []byte, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("--webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	signer.Sign(req.Header, id, body, time.Now())
	return probeExpect(client, req, http.StatusAccepted, out)
}

// probeReady wants 200 from a /readyz URL.
func probeReady(ctx context.Context, client *http.Client, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--ready: %w", err)
	}
	return probeExpect(client, req, http.StatusOK, out)
}

// probeExpect sends req, prints the status and the start of the answer on
// one line, and fails unless the status is want.
func probeExpect(client *http.Client, req *http.Request, want int, out io.Writer) error {
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	answer := strings.Join(strings.Fields(string(raw)), " ")
	fmt.Fprintf(out, "%s %s: %d %s\n", req.Method, req.URL, resp.StatusCode, answer)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s answered %d, want %d: %s", req.Method, req.URL, resp.StatusCode, want, answer)
	}
	return nil
}
