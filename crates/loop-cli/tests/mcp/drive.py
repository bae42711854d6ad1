"""Drive Loop Engine's MCP server with the `mcp` package's own client (PyPI),
as another agent would: list the tools, run a scripted task to verified
while its progress streams, verify its receipt, read its resources, and
make the calls a careless or hostile client makes. Prints one JSON object
with what it saw; the Rust test asserts on it.

    drive.py stdio LOOP_BINARY PROJECT STATE_DIR
    drive.py http URL TOKEN            (TOKEN `-`: none at all)
    drive.py http URL TOKEN TASK       (another owner's view of TASK)
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def settle_draft(session, draft, leaving):
    for _ in range(600):
        state = json.loads(text_of(await session.call_tool("task_status", {"id": draft})))
        if state.get("state") != leaving:
            return state
        await anyio.sleep(0.1)
    return state


async def peek(session, seen, task):
    """Another owner's view of `task`, and what a read-only token may do."""
    await session.initialize()
    status = await session.call_tool("task_status", {"id": task})
    seen["status"] = {"is_error": status.is_error, "text": text_of(status)}
    try:
        await session.read_resource(f"loop://tasks/{task}/receipt")
        seen["receipt"] = "read"
    except Exception as e:
        seen["receipt"] = str(e)
    resources = await session.list_resources()
    seen["resources"] = [str(r.uri) for r in resources.resources]
    run = await session.call_tool(
        "run_task", {"instruction": "x", "checks": ["true"], "allow_vacuous": True, "model": "scripted:script.yaml"}
    )
    seen["run"] = {"is_error": run.is_error, "text": text_of(run)}
    # Memory: a read-only token reads notes, never adds or forgets one.
    for action, args in [("add", {"text": "from a read token", "about": ["x"]}), ("forget", {"id": "n-0"})]:
        call = await session.call_tool("memory", {"action": action, **args})
        seen[f"memory_{action}"] = {"is_error": call.is_error, "text": text_of(call)}
    listed = await session.call_tool("memory", {"action": "list"})
    seen["memory_list"] = {"is_error": listed.is_error, "text": text_of(listed)}


async def exercise(session, seen):
    init = await session.initialize()
    seen["server"] = init.server_info.name
    tools = await session.list_tools()
    seen["tools"] = sorted(t.name for t in tools.tools)
    seen["read_only"] = sorted(
        t.name for t in tools.tools if t.annotations and t.annotations.read_only_hint
    )

    progress = []

    async def on_progress(p, total, message):
        progress.append({"progress": p, "message": message})

    run = await session.call_tool(
        "run_task",
        {
            "instruction": "write hello.txt",
            "checks": ["grep -qx hello hello.txt"],
            "model": "scripted:script.yaml",
            "wait": True,
            "wait_secs": 120,
        },
        progress_callback=on_progress,
    )
    status = json.loads(text_of(run))
    seen["run_error"] = run.is_error
    seen["outcome"] = status.get("outcome")
    seen["waited"] = status.get("waited")
    seen["progress"] = progress
    task = status.get("id")
    seen["task"] = task

    verify = await session.call_tool("verify_receipt", {"id": task})
    seen["verify"] = json.loads(text_of(verify))

    events = await session.call_tool("task_events", {"id": task, "since": 2})
    seen["events_from"] = [e["seq"] for e in json.loads(text_of(events))["events"]][:1]

    diff = await session.call_tool("diff", {"id": task})
    seen["diff_files"] = [f.get("path") for f in json.loads(text_of(diff))["files"]]

    added = await session.call_tool("memory", {"action": "add", "text": "the client's note", "about": ["mcp"]})
    seen["note_status"] = json.loads(text_of(added)).get("status")
    listed = await session.call_tool("memory", {"action": "list"})
    seen["notes"] = [n["text"] for n in json.loads(text_of(listed))["notes"]]
    shown = await session.call_tool("memory", {"action": "show", "id": json.loads(text_of(added))["id"]})
    seen["note_shown"] = json.loads(text_of(shown)).get("text")

    resources = await session.list_resources()
    seen["resources"] = sorted(str(r.uri) for r in resources.resources)
    templates = await session.list_resource_templates()
    seen["templates"] = sorted(t.uri_template for t in templates.resource_templates)
    receipt = await session.read_resource(f"loop://tasks/{task}/receipt")
    seen["receipt_payload_type"] = json.loads(receipt.contents[0].text).get("payloadType")
    ledger = await session.read_resource(f"loop://tasks/{task}/ledger")
    seen["ledger_kinds"] = [
        json.loads(l)["event"]["kind"] for l in ledger.contents[0].text.splitlines()
    ]
    changes = await session.read_resource(f"loop://tasks/{task}/changes")
    seen["changes"] = changes.contents[0].text

    # An instruction alone: drafted, answered, then run.
    drafted = json.loads(text_of(await session.call_tool(
        "run_task", {"instruction": "write hello.txt saying hello", "model": "scripted:draft.yaml"}
    )))
    draft = drafted.get("draft")
    seen["draft"] = draft
    state = await settle_draft(session, draft, "drafting")
    seen["draft_state"] = state.get("state")
    answered = await session.call_tool("answer", {"draft": draft})
    seen["answered"] = json.loads(text_of(answered))
    state = await settle_draft(session, draft, "drafting")
    seen["draft_started"] = state.get("state")
    drafted_task = state.get("task_id")
    done = json.loads(text_of(await session.call_tool(
        "task_status", {"id": drafted_task, "wait": True, "wait_secs": 120}
    )))
    seen["drafted_outcome"] = done.get("outcome")
    again = await session.call_tool("answer", {"draft": draft})
    seen["answer_again"] = {"is_error": again.is_error, "text": text_of(again)}

    # What a careless or hostile client sends.
    bad = await session.call_tool("run_task", {"instruction": "x", "rm_rf": True})
    seen["unknown_argument"] = {"is_error": bad.is_error, "text": text_of(bad)}
    missing = await session.call_tool("task_status", {"id": "no-such-task"})
    seen["missing_task"] = {"is_error": missing.is_error, "text": text_of(missing)}
    traversal = await session.call_tool("task_status", {"id": "../../etc/passwd"})
    seen["traversal"] = {"is_error": traversal.is_error, "text": text_of(traversal)}
    try:
        await session.read_resource("loop://tasks/../../etc/passwd/receipt")
        seen["bad_resource"] = "read"
    except Exception as e:  # the server's error, as the client raises it
        seen["bad_resource"] = str(e)
    outside = await session.call_tool(
        "run_task",
        {"instruction": "x", "checks": ["true"], "model": "scripted:/etc/passwd"},
    )
    seen["model_outside"] = {"is_error": outside.is_error, "text": text_of(outside)}


SEEN = {}


async def main():
    seen = SEEN
    if sys.argv[1] == "stdio":
        binary, project, state = sys.argv[2], sys.argv[3], sys.argv[4]
        params = StdioServerParameters(
            command=binary,
            args=["mcp", "--project", project],
            env={"LOOP_STATE_DIR": state, "PATH": os.environ.get("PATH", "")},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await exercise(session, seen)
    else:
        import httpx2
        from mcp.shared._httpx_utils import create_mcp_http_client

        url, token = sys.argv[2], sys.argv[3]
        if token == "-":
            # No token: the server must refuse before any MCP is spoken.
            async with httpx2.AsyncClient() as c:
                r = await c.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={"Accept": "application/json, text/event-stream"},
                )
                seen["status"] = r.status_code
                seen["body"] = r.text
            print(json.dumps(seen))
            return
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    if len(sys.argv) > 4:
                        await peek(session, seen, sys.argv[4])
                    else:
                        await exercise(session, seen)
    print(json.dumps(seen))


try:
    anyio.run(main)
except BaseException:
    print(json.dumps({"failed_after": SEEN}))
    raise

