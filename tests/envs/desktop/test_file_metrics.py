"""OSWorld's metrics for plain files, PDFs and Thunderbird's profile files, checked against
OSWorld's semantics on files the tests write: CSV, JSON and YAML, text, tar and zip archives,
SQLite, PDFs (written with pypdf), prefs.js and msgFilterRules.dat. No desktop starts."""

from __future__ import annotations

import json
import shutil
import sqlite3
import zipfile
from pathlib import Path

import pytest
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from envs.desktop.coverage import METRIC_OPTIONS
from envs.desktop.evaluate import METRICS
from envs.desktop.file_metrics import (
    check_csv,
    check_json,
    check_line_number,
    compare_archive,
    compare_csv,
    compare_python_pure_text,
    compare_zip_files,
    diff_text_file,
    file_contains,
    run_sqlite3,
)
from envs.desktop.pdf_metrics import check_pdf_pages, compare_pdfs
from envs.desktop.thunderbird import check_thunderbird_filter, check_thunderbird_prefs


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def write_pdf(path: Path, *pages: str) -> str:
    """A PDF with one line of Helvetica text per page, as a PDF printer writes it."""
    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(612, 792)
        font = DictionaryObject({NameObject("/Type"): NameObject("/Font"),
                                 NameObject("/Subtype"): NameObject("/Type1"),
                                 NameObject("/BaseFont"): NameObject("/Helvetica")})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject(
            {NameObject("/F1"): writer._add_object(font)})})
        content = DecodedStreamObject()
        content.set_data(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(content)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        writer.write(file)
    return str(path)


def test_every_metric_here_is_registered_with_its_options() -> None:
    for name in ("compare_csv", "check_csv", "check_json", "diff_text_file", "compare_archive",
                 "compare_zip_files", "run_sqlite3", "file_contains", "check_line_number",
                 "compare_python_pure_text", "compare_pdfs", "check_pdf_pages",
                 "check_thunderbird_prefs", "check_thunderbird_filter"):
        assert name in METRICS and name in METRIC_OPTIONS
    assert METRIC_OPTIONS["compare_archive"] == {"file_path", "file_type"}
    assert METRIC_OPTIONS["check_json"] == {"is_yaml"}


def test_compare_csv_compares_lines_strictly_unless_told(tmp_path) -> None:
    gold = write(tmp_path / "gold.csv", "Name,Age\nAnn,30\n")
    assert compare_csv(write(tmp_path / "same.csv", "Name,Age\nAnn,30\n"), gold) == 1.0
    padded = write(tmp_path / "padded.csv", "Name,Age \n ann,30\n")
    assert compare_csv(padded, gold) == 0.0
    assert compare_csv(padded, gold, strict=False) == 0.0  # still "ann"
    assert compare_csv(padded, gold, strict=False, ignore_case=True) == 1.0
    assert compare_csv(None, gold) == 0.0


def test_check_csv_wants_every_expected_record_and_no_unexpected_one(tmp_path) -> None:
    accounts = write(tmp_path / "accounts.csv", "url,user,password\n"
                     "imap://outlook.office365.com,anonym-x2024@outlook.com,x\n"
                     "smtp://smtp.office365.com,anonym-x2024@outlook.com,y\n")
    outlook = {"url": "imap://outlook.office365.com", "user": "anonym-x2024@outlook.com"}
    assert check_csv(accounts, {"expect": [outlook]}) == 1.0
    assert check_csv(accounts, {"unexpect": [outlook]}) == 0.0
    assert check_csv(accounts, {"unexpect": [{"url": "imap://other"}]}) == 1.0
    assert check_csv(accounts, {"expect": [outlook | {"password": "y"}]}) == 0.0
    assert check_csv(accounts, {"expect": [{"missing-column": "x"}]}) == 0.0
    assert check_csv(None, {"unexpect": [outlook]}) == 0.0


def test_check_json_follows_key_paths_with_value_rules(tmp_path) -> None:
    store = write(tmp_path / "xulstore.json", json.dumps(
        {"chrome://messenger/content/messenger.xhtml": {"folderTree": {"mode": "smart,tags"}},
         "list": [{"name": "a"}]}))
    mode = {"key": ["chrome://messenger/content/messenger.xhtml", "folderTree", "mode"],
            "method": "re", "ref": r"\bsmart\b"}
    assert check_json(store, {"expect": [mode]}) == 1.0
    assert check_json(store, {"expect": [mode | {"ref": r"\bunified\b"}]}) == 0.0
    assert check_json(store, {"expect": [{"key": ["absent"], "method": "eq", "ref": None}]}) == 0.0
    assert check_json(store, {"expect": [{"key": ["list", 0, "name"], "method": "eq",
                                          "ref": "a"}]}) == 1.0
    assert check_json(store, {"unexpect": [mode]}) == 0.0
    assert check_json(store, {"unexpect": [{"key": ["absent"], "method": "eq", "ref": 1}]}) == 1.0
    config = write(tmp_path / "config.yaml", "model:\n  name: tiny\n")
    assert check_json(config, {"expect": [{"key": ["model", "name"], "method": "eq",
                                           "ref": "tiny"}]}, is_yaml=True) == 1.0
    assert check_json(None, {"expect": [mode]}) == 0.0


def test_diff_text_file_is_the_line_similarity(tmp_path) -> None:
    gold = write(tmp_path / "real.tex", "a\nb\nc\nd\n")
    assert diff_text_file(write(tmp_path / "same.tex", "a\nb\nc\nd"), gold) == 1.0
    assert diff_text_file(write(tmp_path / "half.tex", "a\nb\nx\ny\n"), gold) == 0.5
    assert diff_text_file(None, gold) == 0.0


def test_compare_archive_pairs_the_files_of_a_folder_in_both_archives(tmp_path) -> None:
    for side, week1 in (("pred", "Week one"), ("gold", "Week one")):
        folder = tmp_path / side / "lecture_slides"
        write_pdf(folder / "week0.pdf", "Week zero")
        write_pdf(folder / "week1.pdf", week1)
        shutil.make_archive(str(tmp_path / side), "zip", tmp_path / side)
    pred, gold = str(tmp_path / "pred.zip"), str(tmp_path / "gold.zip")
    options = {"file_path": "lecture_slides", "file_type": "pdf"}
    assert compare_archive(pred, gold, **options) == 1.0
    write_pdf(tmp_path / "pred" / "lecture_slides" / "week1.pdf", "Completely different")
    shutil.make_archive(str(tmp_path / "pred"), "zip", tmp_path / "pred")
    assert 0.4 < compare_archive(pred, gold, **options) < 1.0  # one pair alike, one not
    (tmp_path / "pred" / "lecture_slides" / "week1.pdf").unlink()
    shutil.make_archive(str(tmp_path / "pred"), "gztar", tmp_path / "pred")
    assert compare_archive(str(tmp_path / "pred.tar.gz"), gold, **options) == 0.0  # names differ
    assert compare_archive(None, gold, **options) == 0.0


def test_compare_archive_compares_text_by_default_and_refuses_an_unknown_type(tmp_path) -> None:
    for side in ("pred", "gold"):
        write(tmp_path / side / "notes.txt", "same text\n")
        shutil.make_archive(str(tmp_path / side), "gztar", tmp_path / side)
    pred, gold = str(tmp_path / "pred.tar.gz"), str(tmp_path / "gold.tar.gz")
    assert compare_archive(pred, gold) == 1.0
    with pytest.raises(ValueError, match="cannot compare 'video' files"):
        compare_archive(pred, gold, file_type="video")


def test_compare_archive_never_unpacks_outside_its_folder(tmp_path) -> None:
    hostile = tmp_path / "hostile.zip"
    with zipfile.ZipFile(hostile, "w") as archive:
        archive.writestr("../../escaped.txt", "out")
    write(tmp_path / "gold" / "escaped.txt", "out")
    shutil.make_archive(str(tmp_path / "gold"), "zip", tmp_path / "gold")
    compare_archive(str(hostile), str(tmp_path / "gold.zip"))
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped.txt").exists()


def test_compare_zip_files_wants_equal_members_and_similar_pdf_text(tmp_path) -> None:
    def zipped(name: str, note: str, pdf_text: str) -> str:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("essay/note.txt", note)
            archive.write(write_pdf(tmp_path / f"{name}.pdf", pdf_text), "essay/essay.pdf")
        return str(path)

    gold = zipped("gold.zip", "hi", "Recruitment and retention of health professionals")
    assert compare_zip_files(zipped("same.zip", "hi", "Recruitment and retention of health "
                                    "professionals"), gold) == 1.0
    assert compare_zip_files(zipped("note.zip", "bye", "Recruitment and retention of health "
                                    "professionals"), gold) == 0.0
    assert compare_zip_files(zipped("pdf.zip", "hi", "Something else entirely"), gold) == 0.0
    assert compare_zip_files(None, gold) == 0.0


def test_run_sqlite3_scores_the_first_selected_value(tmp_path) -> None:
    database = tmp_path / "global-messages-db.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("create table messageAttributes (attributeID, value, messageID)")
        connection.execute("insert into messageAttributes values (58, 1, 7)")
    sql = "select sum(1) > 0 from messageAttributes where attributeID = {} and value = 1"
    assert run_sqlite3(str(database), {"sql": sql.format(58)}) == 1.0
    assert run_sqlite3(str(database), {"sql": sql.format(59)}) == 0.0  # sum of nothing is NULL
    assert run_sqlite3(None, {"sql": sql.format(58)}) == 0.0


def test_file_contains_and_check_line_number_read_a_report(tmp_path) -> None:
    report = write(tmp_path / "System_Resources_Report.txt",
                   "12:00:01 CPU %user %nice\n12:00:02 all 1.0 0.0\nAverage: all 1.0\n")
    assert file_contains(report, {"expected": ["CPU", "%user"]}) == 1.0
    assert file_contains(report, {"expected": ["CPU", "%steal"]}) == 0.0
    assert file_contains(None, {"expected": []}) == 0.0
    assert check_line_number(report, {"expected": "2"}) == 1.0
    assert check_line_number(report, {"expected": "3"}) == 0.0
    assert check_line_number(str(tmp_path / "absent.txt"), {"expected": "0"}) == 0.0


def test_compare_python_pure_text_ignores_all_whitespace(tmp_path) -> None:
    gold = write(tmp_path / "colab_Gold.py", "print('a')\nx = 1\n")
    assert compare_python_pure_text(write(tmp_path / "a.py", "print( 'a' )\n\n  x=1"), gold) == 1.0
    assert compare_python_pure_text(write(tmp_path / "b.py", "print('b')\nx = 1\n"), gold) == 0.0
    assert compare_python_pure_text(None, gold) == 0.0


def test_compare_pdfs_scores_text_similarity_and_averages_lists(tmp_path) -> None:
    gold = write_pdf(tmp_path / "gold.pdf", "Invoice 243729", "Total 12 USD")
    assert compare_pdfs(write_pdf(tmp_path / "same.pdf", "Invoice 243729", "Total 12 USD"),
                        gold) == 1.0
    other = write_pdf(tmp_path / "other.pdf", "zzzz")
    assert compare_pdfs(other, gold) < 0.2
    assert compare_pdfs([gold, other], [gold, gold]) == pytest.approx(
        (1.0 + compare_pdfs(other, gold)) / 2)
    assert compare_pdfs([None, gold], [gold, gold]) == 0.5  # a missing file scores 0
    assert compare_pdfs(write(tmp_path / "broken.pdf", "not a pdf"), gold) == 0.0


def test_check_pdf_pages_compares_the_page_count(tmp_path) -> None:
    one_page = write_pdf(tmp_path / "Resize_Cells_Fit_Page.pdf", "all cells")
    assert check_pdf_pages(one_page, {"relation": "eq", "ref_value": 1}) == 1.0
    two_pages = write_pdf(tmp_path / "two.pdf", "a", "b")
    assert check_pdf_pages(two_pages, {"relation": "eq", "ref_value": 1}) == 0.0
    assert check_pdf_pages(two_pages, {"relation": "gt", "ref_value": 1}) == 1.0
    assert check_pdf_pages(None, {"relation": "eq", "ref_value": 1}) == 0.0


PREFS = """// Mozilla User Preferences
user_pref("mail.identity.id1.htmlSigText", "Anonym\\nXYZ Lab");
user_pref("mail.identity.id1.compose_html", false);
user_pref("mail.server.server1.check_time", 10);
user_pref("mail.server.server1.check_time", 5);
"""


def test_check_thunderbird_prefs_reads_user_prefs_as_json(tmp_path) -> None:
    prefs = write(tmp_path / "prefs.js", PREFS)
    signature = {"mail.identity.id1.htmlSigText": {"method": "re.S", "ref": "Anonym.+XYZ Lab"}}
    assert check_thunderbird_prefs(prefs, {"expect": signature}) == 1.0
    assert check_thunderbird_prefs(prefs, {"expect": {
        "mail.identity.id1.compose_html": {"method": "eq", "ref": False}}}) == 1.0
    # a key set twice counts its last line
    assert check_thunderbird_prefs(prefs, {"expect": {
        "mail.server.server1.check_time": {"method": "eq", "ref": 5}}}) == 1.0
    assert check_thunderbird_prefs(prefs, {"expect": {
        "mail.absent": {"method": "eq", "ref": 1}}}) == 0.0
    assert check_thunderbird_prefs(prefs, {"unexpect": {
        "mail.identity.id1.compose_html": {"method": "eq", "ref": False}}}) == 0.0
    assert check_thunderbird_prefs(prefs, {"unexpect": {
        "mail.absent": {"method": "eq", "ref": 1}}}) == 1.0
    assert check_thunderbird_prefs(None, {"expect": signature}) == 0.0


FILTERS = """version="9"
logging="no"
name="Promotions"
enabled="yes"
type="17"
action="Move to folder"
actionValue="mailbox://nobody@Local%20Folders/Promotions"
condition="AND (subject,contains,discount) AND (from,contains,\\"shop (news)\\")"
name="Everything"
enabled="no"
type="17"
action="Mark read"
condition="ALL"
"""


def test_check_thunderbird_filter_matches_records_against_parsed_filters(tmp_path) -> None:
    filters = write(tmp_path / "msgFilterRules.dat", FILTERS)
    promotions = {"enabled": "yes", "action": "Move to folder",
                  "actionValue": "mailbox://nobody@Local%20Folders/Promotions",
                  "condition": ["AND (subject,contains,discount)",
                                'AND (from,contains,"shop (news)")']}
    assert check_thunderbird_filter(filters, {"expect": [promotions]}) == 1.0
    assert check_thunderbird_filter(filters, {"expect": [
        promotions | {"condition": ["AND (subject,contains,discount)"]}]}) == 0.0
    assert check_thunderbird_filter(filters, {"expect": [{"name": "Everything",
                                                          "condition": ["ALL"]}]}) == 1.0
    assert check_thunderbird_filter(filters, {"unexpect": [{"enabled": "no"}]}) == 0.0
    assert check_thunderbird_filter(filters, {"unexpect": [{"name": "Spam"}]}) == 1.0
    assert check_thunderbird_filter(None, {"expect": [promotions]}) == 0.0
