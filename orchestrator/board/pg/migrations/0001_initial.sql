-- The PostgreSQL board, version 1: every part of the control plane as rows.
-- Applied once by `orchestrator init --board URL` / `orchestrator migrate`, in one
-- transaction under an advisory lock (see orchestrator.board.pg.schema).

CREATE TABLE tasks (
    id            bigint PRIMARY KEY,             -- task_007 is 7
    status        text NOT NULL DEFAULT 'pending',
    priority      integer NOT NULL DEFAULT 0,
    blocked_by    bigint[] NOT NULL DEFAULT '{}',
    owner         text,                           -- the teammate holding the lease
    machine       text,                           -- the machine it runs on
    fence         bigint NOT NULL DEFAULT 0,      -- highest lease token issued
    lease_token   bigint,
    lease_expires timestamptz,                    -- the database's clock, never a machine's
    lease_acquired timestamptz,
    lease_renewed timestamptz,
    attempts      integer NOT NULL DEFAULT 0,
    data          jsonb NOT NULL,                 -- the rest of the task (subject, branch …)
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
-- claim order among pending tasks: higher priority first, then the lower id
CREATE INDEX tasks_pending ON tasks (priority DESC, id) WHERE status = 'pending';
CREATE INDEX tasks_status ON tasks (status, id);
CREATE INDEX tasks_leases ON tasks (lease_expires) WHERE status = 'in_progress';
-- what `problems` looks at: unfinished tasks that wait for others
CREATE INDEX tasks_blocked ON tasks (id)
    WHERE cardinality(blocked_by) > 0 AND status NOT IN ('merged', 'discarded', 'cancelled');

CREATE SEQUENCE task_ids AS bigint;

CREATE TABLE events (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts       timestamptz NOT NULL DEFAULT clock_timestamp(),
    event    text NOT NULL,
    task     text,
    actor    text,
    machine  text,
    data     jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_task ON events (task, seq);

CREATE TABLE messages (
    n        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id       text NOT NULL UNIQUE,
    mailbox  text NOT NULL,
    ts       timestamptz NOT NULL DEFAULT clock_timestamp(),
    data     jsonb NOT NULL
);
CREATE INDEX messages_mailbox ON messages (mailbox, n);

CREATE TABLE read_positions (        -- each reader's position in a mailbox
    mailbox  text NOT NULL,
    reader   text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (mailbox, reader)
);

CREATE TABLE task_logs (
    n        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task     text NOT NULL,
    ts       timestamptz NOT NULL DEFAULT clock_timestamp(),
    data     jsonb NOT NULL
);
CREATE INDEX task_logs_task ON task_logs (task, n);

CREATE TABLE teammates (             -- teammate status, one row per teammate per machine
    machine   text NOT NULL,
    name      text NOT NULL,
    host      text NOT NULL,
    pid       integer,
    task      text,
    heartbeat timestamptz NOT NULL DEFAULT now(),
    data      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (machine, name)
);

CREATE TABLE requests (              -- permission and plan requests and their answers
    id          text PRIMARY KEY,
    kind        text NOT NULL,
    task        text,
    data        jsonb NOT NULL,
    answer      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    answered_at timestamptz
);
CREATE INDEX requests_open ON requests (created_at) WHERE answer IS NULL;

-- Wake-ups: every change of these tables is a NOTIFY on channel `orch_<table>`
-- (payload: the row's key), delivered at commit. Listeners take it as a hint and
-- re-read; after a lost connection they rescan everything.
CREATE FUNCTION notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- one IF per table: PL/pgSQL plans each statement against NEW's own columns
    IF TG_TABLE_NAME = 'tasks' THEN
        PERFORM pg_notify('orch_tasks', NEW.id || ' ' || NEW.status);
    ELSIF TG_TABLE_NAME = 'messages' THEN
        PERFORM pg_notify('orch_messages', NEW.mailbox);
    ELSIF TG_TABLE_NAME = 'events' THEN
        PERFORM pg_notify('orch_events', NEW.seq::text);
    ELSIF TG_TABLE_NAME = 'task_logs' THEN
        PERFORM pg_notify('orch_task_logs', NEW.task);
    ELSIF TG_TABLE_NAME = 'requests' THEN
        PERFORM pg_notify('orch_requests', NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_notify AFTER INSERT OR UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION notify_change();
CREATE TRIGGER messages_notify AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION notify_change();
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION notify_change();
CREATE TRIGGER task_logs_notify AFTER INSERT ON task_logs
    FOR EACH ROW EXECUTE FUNCTION notify_change();
CREATE TRIGGER requests_notify AFTER INSERT OR UPDATE ON requests
    FOR EACH ROW EXECUTE FUNCTION notify_change();
