"""Drive the web console in headless Chromium (through chromedriver) as a
person would: sign in, start a task from the form, watch its live story,
approve the command it asks to run, see it verified and its receipt hold,
read the diff, apply it. Screenshots of each step go to OUTDIR.

Then a task started from the command line (the same project's store)
appears in the console's list while it is open, and its story plays live.

usage: console.py URL TOKEN PROJECT OUTDIR LOOP STATE
"""

import os
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

url, token, project, outdir, loop_bin, state = sys.argv[1:7]
os.makedirs(outdir, exist_ok=True)

opts = Options()
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
    opts.add_argument(a)
opts.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(driver, 60)
step = 0


def shot(name):
    global step
    step += 1
    driver.save_screenshot(os.path.join(outdir, f"{step:02d}-{name}.png"))


def text_of(css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def wait_text(css, needle):
    wait.until(lambda d: needle in d.find_element(By.CSS_SELECTOR, css).text)


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
    driver.find_element(By.CSS_SELECTOR, "#view form button[type=submit]").click()

    # The live story: the command that needs a person appears, and the
    # question is answered in place.
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Waiting for a person")
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[text()='Approve']")))
    shot("asked")
    driver.find_element(By.CSS_SELECTOR, "input[name=message]").send_keys("fine, go on")
    driver.find_element(By.XPATH, "//button[text()='Approve']").click()

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
    driver.find_element(By.XPATH, "//button[text()='Apply to the project']").click()
    wait.until(EC.alert_is_present())
    driver.switch_to.alert.accept()
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(project, "hello.txt")):
        assert time.time() < deadline, "apply from the console changed nothing"
        time.sleep(0.2)
    wait_text("#view", "applied")
    shot("applied")

    # An instruction alone: the drafted contract is shown, accepted here,
    # and the task it starts is verified.
    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("write hello2.txt saying hello")
    driver.find_element(By.ID, "model").send_keys("scripted:draft.yaml")
    driver.find_element(By.CSS_SELECTOR, "#view form button[type=submit]").click()
    wait_text("#view", "The critic accepted this contract")
    assert "grep -q hello hello2.txt" in driver.find_element(By.ID, "contract").get_attribute("value")
    shot("draft-proposed")
    driver.find_element(By.XPATH, "//button[text()='Accept and start']").click()
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Verification #1: accepted")

    # A task stopped from its page: it ends cancelled, with its receipt.
    driver.get(url + "/#/new")
    wait.until(EC.visibility_of_element_located((By.ID, "instruction")))
    driver.find_element(By.ID, "instruction").send_keys("wait a long while")
    driver.find_element(By.ID, "checks").send_keys("test -f never-made.txt")
    driver.find_element(By.ID, "model").send_keys("scripted:long.yaml")
    driver.find_element(By.CSS_SELECTOR, "#view form button[type=submit]").click()
    wait.until(lambda d: "/#/task/" in d.current_url)
    wait_text("ol.trace", "Cycle 1")
    wait.until(EC.element_to_be_clickable((By.XPATH, "//button[text()='Cancel the task']")))
    driver.find_element(By.XPATH, "//button[text()='Cancel the task']").click()
    wait.until(EC.alert_is_present())
    driver.switch_to.alert.accept()
    wait_text("#view", "cancelled")
    shot("cancelled")

    # The list shows them, with their cost; a phone-wide window still reads.
    driver.get(url + "/#/")
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#view table").text.count("verified") >= 2)
    driver.set_window_size(390, 844)
    shot("list-phone")
    driver.set_window_size(1280, 1000)

    # The command line runs a task in the same project: the open list shows
    # it (the token is an administrator's), and its story plays.
    cli = subprocess.Popen(
        [loop_bin, "run", "from the command line", "--check", "test -f README.md", "--allow-vacuous",
         "--model", "scripted:" + os.path.join(project, "cli.yaml"), "--project", project],
        env={**os.environ, "LOOP_STATE_DIR": state},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_text("#view table", "from the command line")
    driver.find_element(By.LINK_TEXT, [
        r.find_element(By.TAG_NAME, "a").text
        for r in driver.find_elements(By.CSS_SELECTOR, "#view tbody tr")
        if "from the command line" in r.text
    ][0]).click()
    wait_text("ol.trace", "Verification #1: accepted")
    shot("cli-task")
    assert cli.wait(timeout=60) == 0
    print("ok")
finally:
    driver.quit()
