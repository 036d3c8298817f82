-- The presence seed's tables. A webhook is applied once: its event id is
-- claimed in processed_webhook_events in the same transaction that changes
-- user_presence, so a retry finds the claim and changes nothing.
CREATE TABLE IF NOT EXISTS processed_webhook_events (
    event_id     text PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);

-- One row per user: the presence of the highest sequence_number applied.
-- updated_at is the publisher's timestamp of that change.
CREATE TABLE IF NOT EXISTS user_presence (
    user_id         text PRIMARY KEY,
    presence        text NOT NULL,
    sequence_number bigint NOT NULL,
    updated_at      timestamptz NOT NULL
);
