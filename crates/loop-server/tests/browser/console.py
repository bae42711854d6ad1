"""Drive the web console in headless Chromium (through chromedriver) as a
person would: sign in, start a task from the form, watch its live story,
approve the command it asks to run, see it verified and its receipt hold,
read the diff, apply it. Screenshots of each step go to OUTDIR.

Then a task started from the command line (the same project's store)
appears in the console's list while it is open, and its story plays live.

Then the memory page: a note added, listed, forgotten.

Then the list as a tool: searched, filtered by outcome and owner (the
filters kept in the address: reload and back keep them), with a totals row
for what it shows; the list and a task's page at a desktop's width and at
a phone's (390 px: nothing scrolls sideways); no page shows the server's
project or state directory, nor a stray "null" or "undefined".

With LOOP_UPDATE_SCREENSHOTS=1, the screenshots the documentation shows are
copied to docs/console-list.png, docs/console-task.png, docs/console-phone.png.

usage: console.py URL TOKEN PROJECT OUTDIR LOOP STATE
"""

import os
import re
import shutil
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

url, token, project, outdir, loop_bin, state = sys.argv[1:7]
os.makedirs(outdir, exist_ok=True)

opts = Options()
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
    opts.add_argument(a)
opts.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
# The page redraws as a task changes: an element read in a wait may go stale.
wait = WebDriverWait(driver, 60, ignored_exceptions=[StaleElementReferenceException])
step = 0


shots = {}


def shot(name):
    global step
    step += 1
    shots[name] = os.path.join(outdir, f"{step:02d}-{name}.png")
    driver.save_screenshot(shots[name])


def text_of(css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def wait_text(css, needle):
    wait.until(lambda d: needle in d.find_element(By.CSS_SELECTOR, css).text)


# The list redraws itself as tasks change: read it in one go, in the page.
def rows():
    return driver.execute_script(
        "return [...document.querySelectorAll('#tasks tbody tr[data-id]')]"
        ".map(r => ({id: r.dataset.id, text: r.innerText}))")


def row_id(needle):
    return next((r["id"] for r in rows() if needle in r["text"]), None)


def click_fresh(css, by=By.CSS_SELECTOR):
    """Click what `css` finds, found anew each try: the page redraws itself
    as the task's state arrives, so an element found a moment ago may be gone."""
    deadline = time.time() + 30
    while True:
        try:
            driver.find_element(by, css).click()
            return
        except StaleElementReferenceException:
            assert time.time() < deadline, f"{css} kept being redrawn for 30 s"
            time.sleep(0.2)


def open_row(needle):
    """Click the link of the list's row that says `needle`."""
    tid = row_id(needle)
    assert tid, f"no row says {needle!r}: {rows()}"
    click_fresh(f'#tasks tr[data-id="{tid}"] td a')
    return tid


def submit_form():
    """Submit the form on the page: its button brought to the middle of
    the window first (a message in the status bar may cover the bottom)."""
    button = driver.find_element(By.CSS_SELECTOR, "#view form button[type=submit]")
    # (The last message goes on its own after 5 s; a person would wait.)
    wait.until(lambda d: d.find_element(By.ID, "status").text == "")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    button.click()


def choose(select_id, value):
    Select(driver.find_element(By.ID, select_id)).select_by_value(value)


def list_settled(count=None, needle=None):
    """The list shows `count` rows (each saying `needle`) and the totals agree."""
    def settled(_):
        shown = rows()
        if count is not None and len(shown) != count:
            return False
        if needle is not None and not all(needle in r["text"] for r in shown):
            return False
        totals = driver.execute_script(
            "const t = document.getElementById('totals');"
            "return t ? [t.dataset.count, t.querySelector('.total-count').textContent] : null")
        return bool(shown) and totals == [str(len(shown))] * 2
    wait.until(settled)
    return rows()


def open_details():
    driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = true; })")


def clean_page(where):
    """No server path anywhere on the page, no stray null in a cell or a fact."""
    open_details()
    text = driver.execute_script("return document.body.innerText")
    for secret in (project, state):
        assert secret not in text, f"{where} shows the server path {secret}:\n{text}"
    cells = driver.execute_script(
        "return [...document.querySelectorAll('td, th, dd, dt')].map(e => e.innerText)")
    for c in cells:
        assert not re.search(r"\b(null|undefined|NaN)\b", c), f"{where} shows {c!r}"
    stray = re.search(r"(?m)^\s*(null|undefined|NaN)\s*$", text)
    assert not stray, f"{where} shows a stray {stray.group(1)!r}:\n{text}"


def fits(where):
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{where} scrolls sideways at {width[1]} px: {width[0]} px wide"


try:
    driver.get(url + "/")
    wait.until(EC.visibility_of_element_located((By.ID, "token")))
    shot("sign-in")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#signin-form button").click()
    wait_text("#view", "Tasks")

    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("write hello.txt, then mark it approved")
    driver.find_element(By.ID, "checks").send_keys("grep -q hello hello.txt\ntest -f approved.txt")
    shot("new-task")
    submit_form()

    # The live story: the command that needs a person appears, and the
    # question is answered in place.
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Waiting for a person")
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[text()='Approve']")))
    shot("asked")
    driver.find_element(By.CSS_SELECTOR, "input[name=message]").send_keys("fine, go on")
    click_fresh("//button[text()='Approve']", By.XPATH)

    # Verified, its receipt holds, its change shown.
    wait_text("ol.trace", "Verification #1: accepted")
    wait_text("#view", "The receipt holds and the task was verified.")
    wait_text("pre.diff", "+hello")
    shot("verified")
    trace = text_of("ol.trace")
    assert "Approval: approved (by the API (owner web" in trace, trace
    assert "fine, go on" in trace, trace
    assert "✓ write_file hello.txt" in trace, trace

    # Apply from the page: the file is in the project.
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[text()='Apply to the project']")))
    click_fresh("//button[text()='Apply to the project']", By.XPATH)
    wait.until(EC.alert_is_present())
    driver.switch_to.alert.accept()
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(project, "hello.txt")):
        assert time.time() < deadline, "apply from the console changed nothing"
        time.sleep(0.2)
    wait_text("#view", "applied")
    shot("applied")

    # A file given with the task from the form reaches it; what it made
    # downloads from its page, checked against the receipt's digest.
    given = os.path.join(os.path.dirname(outdir), "given.txt")
    with open(given, "w") as f:
        f.write("given by a person\n")
    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("copy the given file to out.txt")
    driver.find_element(By.ID, "checks").send_keys("grep -q 'given by a person' out.txt")
    driver.find_element(By.ID, "model").send_keys("scripted:upload.yaml")
    driver.find_element(By.ID, "inputs").send_keys(given)
    submit_form()
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("#view", "The receipt holds and the task was verified.")
    wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "ul.files a.download")))
    click_fresh("ul.files a.download")
    wait_text("#status", "downloaded out.txt (SHA-256")
    # The whole change set downloads too, as a patch.
    whole = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.downloads a.download")))
    assert "Download the change set (.patch)" in whole.text, whole.text
    shot("downloaded")

    # An instruction alone: the drafted contract is shown, accepted here,
    # and the task it starts is verified.
    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("write hello2.txt saying hello")
    driver.find_element(By.ID, "model").send_keys("scripted:draft.yaml")
    submit_form()
    wait_text("#view", "The critic accepted this contract")
    assert "grep -q hello hello2.txt" in driver.find_element(By.ID, "contract").get_attribute("value")
    shot("draft-proposed")
    click_fresh("//button[text()='Accept and start']", By.XPATH)
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Verification #1: accepted")

    # A task stopped from its page: it ends cancelled, with its receipt.
    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("wait a long while")
    driver.find_element(By.ID, "checks").send_keys("test -f never-made.txt")
    driver.find_element(By.ID, "model").send_keys("scripted:long.yaml")
    submit_form()
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Cycle 1")
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[text()='Cancel the task']")))
    click_fresh("//button[text()='Cancel the task']", By.XPATH)
    wait.until(EC.alert_is_present())
    driver.switch_to.alert.accept()
    wait_text("#view", "cancelled")
    shot("cancelled")

    # The list shows them, with their cost.
    driver.get(url + "/#/")
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#view table").text.count("verified") >= 2)

    # The command line runs a task in the same project: the open list shows
    # it (the token is an administrator's), and its story plays.
    cli = subprocess.Popen(
        [loop_bin, "run", "from the command line", "--check", "test -f README.md", "--allow-vacuous",
         "--model", "scripted:" + os.path.join(project, "cli.yaml"), "--project", project],
        env={**os.environ, "LOOP_STATE_DIR": state},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_text("#view table", "from the command line")
    open_row("from the command line")
    wait_text("ol.trace", "Verification #1: accepted")
    shot("cli-task")
    assert cli.wait(timeout=60) == 0

    # The list as a tool. Every task there is, with totals for them.
    driver.get(url + "/#/")
    wait_text("#view", "Tasks")
    everything = list_settled()
    assert len(everything) >= 4, everything
    clean_page("the list")

    # A search: only the task it names, the search kept in the address.
    driver.find_element(By.ID, "f-q").send_keys("hello2")
    list_settled(count=1, needle="write hello2.txt saying hello")
    assert "q=hello2" in driver.current_url, driver.current_url
    shot("list-search")

    # By outcome: the verified ones; reload keeps the filter, back undoes it.
    driver.find_element(By.ID, "f-clear").click()
    list_settled(count=len(everything))
    choose("f-outcome", "verified")
    verified = list_settled(count=4, needle="verified")
    assert not any("wait a long while" in r["text"] for r in verified), verified
    assert "outcome=verified" in driver.current_url, driver.current_url
    shot("list-verified")
    driver.refresh()
    list_settled(count=4, needle="verified")
    assert Select(driver.find_element(By.ID, "f-outcome")).first_selected_option.get_attribute("value") == "verified"
    driver.back()
    list_settled(count=len(everything))
    assert Select(driver.find_element(By.ID, "f-outcome")).first_selected_option.get_attribute("value") == ""

    # By owner: tasks the command line started have none.
    choose("f-owner", "-")
    list_settled(count=1, needle="from the command line")
    choose("f-owner", "web")
    list_settled(count=4, needle="web")
    choose("f-state", "queued")
    wait_text("#tasks", "No task matches these filters.")
    clean_page("an empty list")
    driver.find_element(By.ID, "f-clear").click()
    list_settled(count=len(everything))
    shot("list")

    # Every task's page: no server path, no stray null, its outcome in words.
    for r in everything:
        driver.get(url + "/#/task/" + r["id"])
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "ol.trace[data-complete]")))
        wait_text("ol.trace", "Ended ")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#facts dd"))
        clean_page("task " + r["id"])

    # The first task's page, whole, at a desktop's width.
    first = next(r["id"] for r in everything if "write hello.txt, then mark it approved" in r["text"])
    driver.get(url + "/#/task/" + first)
    driver.refresh()  # drawn anew, its outputs folded
    wait_text("ol.trace", "Verification #1: accepted")
    wait_text("#facts", "verified")
    wait_text("#view", "The receipt holds and the task was verified.")
    shot("task")

    # A phone's width: the list as cards and the task's page, nothing wider
    # than the screen, the cost still there.
    driver.set_window_size(390, 844)
    driver.get(url + "/#/")
    list_settled(count=len(everything))
    fits("the list")
    cost = driver.find_element(By.CSS_SELECTOR, "#tasks tbody tr[data-id] td.c-cost")
    assert cost.is_displayed() and cost.text.startswith("$"), cost.text
    edge = driver.execute_script(
        "return Math.max(...[...document.querySelectorAll('#tasks td, #tasks th')]"
        ".map(e => e.getBoundingClientRect().right))")
    assert edge <= driver.execute_script("return window.innerWidth"), edge
    shot("list-phone")
    driver.get(url + "/#/task/" + first)
    wait_text("ol.trace", "Verification #1: accepted")
    wait_text("#view", "The receipt holds and the task was verified.")
    fits("a task's page")
    open_details()
    fits("a task's page, its outputs open")
    driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = false; }); window.scrollTo(0, 0)")
    shot("task-phone")
    driver.set_window_size(1280, 1000)

    # A task that delegated: its child's question is asked on the
    # parent's page and answered there; the page lists its child, whose
    # page names it.
    deleg = subprocess.Popen(
        [loop_bin, "run", "--task", os.path.join(project, "deleg.task.yaml"), "--on-prompt", "wait",
         "--model", "scripted:" + os.path.join(project, "deleg.yaml"), "--project", project],
        env={**os.environ, "LOOP_STATE_DIR": state},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    driver.get(url + "/#/")
    wait_text("#view table", "hand the work to a child")
    parent = row_id("hand the work to a child")
    driver.get(url + "/#/task/" + parent)
    wait_text("#view", "Child task")
    card = driver.find_element(By.CSS_SELECTOR, "div.card.ask")
    assert "touch child.txt" in card.text, card.text
    asker = card.get_attribute("data-approval").split("/")[0]
    assert asker != parent, asker
    click_fresh("div.card.ask button")  # Approve
    _, err = deleg.communicate(timeout=120)
    assert deleg.returncode == 0, err.decode()
    wait_text("#facts ul.children", "verified")
    wait_text("#facts", "CHILDREN")  # (labels are shown in capitals)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#facts ul.children li a")))
    item = driver.execute_script("return document.querySelector('#facts ul.children li').innerText")
    assert "verified" in item and "writes child.txt" in item, item
    clean_page("a parent's page")
    click_fresh("#facts ul.children li a")
    wait_text("#facts", "PARENT")
    wait_text("#facts", parent)
    assert asker in driver.current_url, (asker, driver.current_url)
    wait_text("ol.trace", "Approval: approved (by the API (owner web")
    clean_page("a child's page")

    # Memory: a note added from its page is listed, then forgotten there.
    driver.get(url + "/#/memory")
    wait.until(EC.visibility_of_element_located((By.ID, "note-text")))
    driver.find_element(By.ID, "note-text").send_keys("the console test's note")
    driver.find_element(By.ID, "note-about").send_keys("console, tests")
    click_fresh("#view form button[type=submit]")
    wait_text("#notes", "the console test's note")
    assert "About: console, tests" in text_of("#notes"), text_of("#notes")
    clean_page("the memory page")
    click_fresh("#notes div.card button.secondary")  # Forget
    wait.until(lambda d: "the console test's note" not in d.find_element(By.ID, "notes").text)
    shot("memory")

    if os.environ.get("LOOP_UPDATE_SCREENSHOTS") == "1":
        repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
        docs = os.path.join(repo, "docs")
        assert os.path.isdir(docs), docs
        for name, to in (("list", "console-list.png"), ("task", "console-task.png"), ("list-phone", "console-phone.png")):
            shutil.copyfile(shots[name], os.path.join(docs, to))
    print("ok")
finally:
    driver.quit()
