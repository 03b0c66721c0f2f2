-- The event log is append-only and only a person answers a request (issue 29).
--
-- The team's role is granted SELECT, INSERT, UPDATE, DELETE on every table
-- (docs/postgresql.md), and whatever reaches the database with it — a teammate, or an
-- agent that got hold of its connection — could delete the audit log or approve its own
-- permission request. These triggers refuse both to every role that is not a member of
-- the schema's owner (the role that runs `orchestrator migrate`; grant it to the roles
-- people use for `approve`, `deny`, the web board and `orchestrator mcp`):
--
-- * events: no UPDATE, DELETE or TRUNCATE;
-- * requests: no answer written (by INSERT or UPDATE), no DELETE or TRUNCATE.
--
-- `session_user` is the role that logged in: SET ROLE cannot lend a team role a
-- person's rights it is not a member of.

CREATE FUNCTION orchestrator.by_person() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(session_user, n.nspowner, 'MEMBER')
    FROM pg_catalog.pg_namespace n WHERE n.nspname = 'orchestrator'
$$;

CREATE FUNCTION orchestrator.events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT orchestrator.by_person() THEN
        RAISE EXCEPTION 'the event log is append-only: % refused for role %', TG_OP,
            session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN COALESCE(NEW, OLD);  -- OLD for a DELETE, nothing for a TRUNCATE
END $$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON orchestrator.events
    FOR EACH ROW EXECUTE FUNCTION orchestrator.events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON orchestrator.events
    FOR EACH STATEMENT EXECUTE FUNCTION orchestrator.events_append_only();

CREATE FUNCTION orchestrator.requests_answered_by_person() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    refused boolean := false;
BEGIN
    IF NOT orchestrator.by_person() THEN
        IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
            refused := true;
        ELSIF TG_OP = 'INSERT' THEN
            refused := NEW.answer IS NOT NULL OR NEW.answered_at IS NOT NULL;
        ELSE
            refused := NEW.answer IS DISTINCT FROM OLD.answer
                OR NEW.answered_at IS DISTINCT FROM OLD.answered_at
                OR NEW.id IS DISTINCT FROM OLD.id;
        END IF;
    END IF;
    IF refused THEN
        RAISE EXCEPTION 'only a person answers or removes a request: % refused for role %',
            TG_OP, session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN COALESCE(NEW, OLD);  -- OLD for a DELETE, nothing for a TRUNCATE
END $$;

CREATE TRIGGER requests_answered_by_person BEFORE INSERT OR UPDATE OR DELETE
    ON orchestrator.requests
    FOR EACH ROW EXECUTE FUNCTION orchestrator.requests_answered_by_person();
CREATE TRIGGER requests_no_truncate BEFORE TRUNCATE ON orchestrator.requests
    FOR EACH STATEMENT EXECUTE FUNCTION orchestrator.requests_answered_by_person();
