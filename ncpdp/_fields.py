"""The field dictionary, as data: id, number, name, format.

Formats follow the standard's picture notation: ``x(n)`` alphanumeric, ``9(n)``
numeric, ``9(n)v999`` implied decimals, ``s9(n)v99`` signed overpunch amount,
``CCYYMMDD`` date. :func:`codec_of` maps a format to the codec that decodes it.

A ``9(n)`` field is decoded as a number only when it counts or measures something
(a count, the fill number, the days supply: :attr:`FieldDef.integer`). Identifiers
and codes typed ``9(n)`` (101-A1 BIN, 402-D2 Rx number, phone numbers, 420-DK codes)
are strings: ``004740`` is not ``4740``.

The D.0 names and numbers are the NCPDP data dictionary's (the segment tables of the
Telecommunication Standard D.0, as public payer sheets and reference implementations
list them); the F6 additions are in ``_F6_TABLE`` below (decision 0011).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FieldDef", "FIELDS", "field_name", "codec_of", "Codec", "F6_FIELD_IDS"]

Codec = Literal["text", "number", "date", "implied", "overpunch"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldDef:
    """One field of the data dictionary. ``number`` is ``None`` and ``format`` ``"?"``
    where the public sources do not give them (the F6-only fields); ``since`` names
    the version that introduced the field (``"F6"``), ``None`` for D.0 fields."""

    id: str
    number: int | None
    name: str
    format: str
    since: str | None = None
    #: A ``9(n)`` field whose value is a quantity (a count, a fill number, days):
    #: decoded as a number. Other ``9(n)`` fields are identifiers or codes, kept as text.
    integer: bool = False

    @property
    def codec(self) -> Codec:
        codec = codec_of(self.format)
        return "text" if codec == "number" and not self.integer else codec

    @property
    def places(self) -> int:
        """Implied decimal places (0 when the format has none)."""
        _, _, frac = self.format.partition("v")
        return len(frac)


def codec_of(fmt: str) -> Codec:
    if fmt == "?":
        return "text"
    if fmt == "CCYYMMDD":
        return "date"
    if fmt.startswith("s9"):
        return "overpunch"
    if fmt.startswith("9") and "v" in fmt:
        return "implied"
    if fmt.startswith("9"):
        return "number"
    return "text"


_TABLE: tuple[tuple[str, int, str, str], ...] = (
    # --- header ---
    ("A1", 101, "BIN Number", "9(6)"),
    ("A2", 102, "Version/Release Number", "x(2)"),
    ("A3", 103, "Transaction Code", "x(2)"),
    ("A4", 104, "Processor Control Number", "x(10)"),
    ("A9", 109, "Transaction Count", "x(1)"),
    ("AK", 110, "Software Vendor/Certification ID", "x(10)"),
    ("AM", 111, "Segment Identification", "x(2)"),
    ("B1", 201, "Service Provider ID", "x(15)"),
    ("B2", 202, "Service Provider ID Qualifier", "x(2)"),
    ("D1", 401, "Date of Service", "CCYYMMDD"),
    ("F1", 501, "Header Response Status", "x(1)"),
    # --- patient (01) ---
    ("CX", 331, "Patient ID Qualifier", "x(2)"),
    ("CY", 332, "Patient ID", "x(20)"),
    ("C4", 304, "Date of Birth", "CCYYMMDD"),
    ("C5", 305, "Patient Gender Code", "9(1)"),
    ("CA", 310, "Patient First Name", "x(12)"),
    ("CB", 311, "Patient Last Name", "x(15)"),
    ("CM", 322, "Patient Street Address", "x(30)"),
    ("CN", 323, "Patient City Address", "x(20)"),
    ("CO", 324, "Patient State/Province Address", "x(2)"),
    ("CP", 325, "Patient ZIP/Postal Zone", "x(15)"),
    ("CQ", 326, "Patient Phone Number", "9(10)"),
    ("C7", 307, "Place of Service", "9(2)"),
    ("CZ", 333, "Employer ID", "x(15)"),
    ("HN", 350, "Patient E-Mail Address", "x(80)"),
    ("4X", 384, "Patient Residence", "9(2)"),
    ("2C", 335, "Pregnancy Indicator", "x(1)"),
    ("1C", 334, "Smoker/Non-Smoker Code", "x(1)"),
    # --- insurance (04) ---
    ("C1", 301, "Group ID", "x(15)"),
    ("C2", 302, "Cardholder ID", "x(20)"),
    ("C3", 303, "Person Code", "x(3)"),
    ("C6", 306, "Patient Relationship Code", "9(1)"),
    ("CC", 312, "Cardholder First Name", "x(12)"),
    ("CD", 313, "Cardholder Last Name", "x(15)"),
    ("C9", 309, "Eligibility Clarification Code", "9(1)"),
    ("FO", 524, "Plan ID", "x(8)"),
    ("CE", 314, "Home Plan", "x(3)"),
    ("2A", 359, "Medigap ID", "x(20)"),
    ("2B", 360, "Medicaid Indicator", "x(2)"),
    ("MT", 391, "Patient Assignment Indicator", "x(1)"),
    ("N5", 115, "Medicaid ID Number", "x(20)"),
    ("N6", 116, "Medicaid Agency Number", "x(15)"),
    ("MG", 990, "Other Payer BIN Number", "9(6)"),
    ("MH", 991, "Other Payer Processor Control Number", "x(10)"),
    ("MJ", 992, "Other Payer Group ID", "x(15)"),
    ("NU", 356, "Other Payer Cardholder ID", "x(20)"),
    ("2D", 361, "Provider Accept Assignment Indicator", "x(1)"),
    ("G2", 997, "CMS Part D Defined Qualified Facility", "x(1)"),
    # --- claim (07) ---
    ("EM", 455, "Prescription/Service Reference Number Qualifier", "x(1)"),
    ("D2", 402, "Prescription/Service Reference Number", "9(12)"),
    ("E1", 436, "Product/Service ID Qualifier", "x(2)"),
    ("D7", 407, "Product/Service ID", "x(19)"),
    ("EN", 456, "Associated Prescription/Service Reference Number", "9(12)"),
    ("EP", 457, "Associated Prescription/Service Date", "CCYYMMDD"),
    ("SE", 458, "Procedure Modifier Code Count", "9(1)"),
    ("ER", 459, "Procedure Modifier Code", "x(2)"),
    ("E7", 442, "Quantity Dispensed", "9(7)v999"),
    ("D3", 403, "Fill Number", "9(2)"),
    ("D5", 405, "Days Supply", "9(3)"),
    ("D6", 406, "Compound Code", "9(1)"),
    ("D8", 408, "Dispense As Written (DAW)/Product Selection Code", "x(1)"),
    ("DE", 414, "Date Prescription Written", "CCYYMMDD"),
    ("DF", 415, "Number of Refills Authorized", "9(2)"),
    ("DJ", 419, "Prescription Origin Code", "9(1)"),
    ("NX", 354, "Submission Clarification Code Count", "9(1)"),
    ("DK", 420, "Submission Clarification Code", "9(2)"),
    ("ET", 460, "Quantity Prescribed", "9(7)v999"),
    ("C8", 308, "Other Coverage Code", "9(2)"),
    ("DT", 429, "Special Packaging Indicator", "9(1)"),
    ("EJ", 453, "Originally Prescribed Product/Service ID Qualifier", "x(2)"),
    ("EA", 445, "Originally Prescribed Product/Service Code", "x(19)"),
    ("EB", 446, "Originally Prescribed Quantity", "9(7)v999"),
    ("28", 600, "Unit of Measure", "x(2)"),
    ("DI", 418, "Level of Service", "9(2)"),
    ("EU", 461, "Prior Authorization Type Code", "9(2)"),
    ("EV", 462, "Prior Authorization Number Submitted", "9(11)"),
    ("EW", 463, "Intermediary Authorization Type ID", "9(2)"),
    ("EX", 464, "Intermediary Authorization ID", "9(11)"),
    ("HD", 343, "Dispensing Status", "x(1)"),
    ("HF", 344, "Quantity Intended To Be Dispensed", "9(7)v999"),
    ("HG", 345, "Days Supply Intended To Be Dispensed", "9(3)"),
    ("NV", 357, "Delay Reason Code", "9(2)"),
    ("E2", 995, "Route of Administration", "x(11)"),
    ("MA", 987, "URL", "x(100)"),
    ("U7", 147, "Pharmacy Service Type", "9(2)"),
    ("EK", 454, "Scheduled Prescription ID Number", "x(12)"),
    ("CW", 330, "Alternate ID", "x(20)"),
    ("G1", 996, "Compound Type", "9(2)"),
    (
        "N4",
        114,
        "Medicaid Subrogation Internal Control Number/Transaction Control Number (ICN/TCN)",
        "x(30)",
    ),
    # --- pharmacy provider (02) ---
    ("EY", 465, "Provider ID Qualifier", "x(2)"),
    ("E9", 444, "Provider ID", "x(15)"),
    # --- prescriber (03) ---
    ("EZ", 466, "Prescriber ID Qualifier", "x(2)"),
    ("DB", 411, "Prescriber ID", "x(15)"),
    ("DR", 427, "Prescriber Last Name", "x(15)"),
    ("2J", 364, "Prescriber First Name", "x(12)"),
    ("PM", 498, "Prescriber Phone Number", "9(10)"),
    ("2K", 365, "Prescriber Street Address", "x(30)"),
    ("2M", 366, "Prescriber City Address", "x(20)"),
    ("2N", 367, "Prescriber State/Province Address", "x(2)"),
    ("2P", 368, "Prescriber ZIP/Postal Zone", "x(15)"),
    ("2E", 468, "Primary Care Provider ID Qualifier", "x(2)"),
    ("DL", 421, "Primary Care Provider ID", "x(15)"),
    ("4E", 470, "Primary Care Provider Last Name", "x(15)"),
    # --- COB (05) ---
    ("4C", 337, "Coordination of Benefits/Other Payments Count", "9(1)"),
    ("5C", 338, "Other Payer Coverage Type", "x(2)"),
    ("6C", 339, "Other Payer ID Qualifier", "x(2)"),
    ("7C", 340, "Other Payer ID", "x(10)"),
    ("E8", 443, "Other Payer Date", "CCYYMMDD"),
    ("HB", 341, "Other Payer Amount Paid Count", "9(1)"),
    ("HC", 342, "Other Payer Amount Paid Qualifier", "x(2)"),
    ("DV", 431, "Other Payer Amount Paid", "s9(6)v99"),
    ("5E", 471, "Other Payer Reject Count", "9(2)"),
    ("6E", 472, "Other Payer Reject Code", "x(3)"),
    ("NR", 353, "Other Payer-Patient Responsibility Amount Count", "9(1)"),
    ("NP", 351, "Other Payer-Patient Responsibility Amount Qualifier", "x(2)"),
    ("NQ", 352, "Other Payer-Patient Responsibility Amount", "s9(6)v99"),
    ("MU", 392, "Benefit Stage Count", "9(1)"),
    ("MV", 393, "Benefit Stage Qualifier", "x(2)"),
    ("MW", 394, "Benefit Stage Amount", "s9(6)v99"),
    # --- workers' compensation (06) ---
    ("DY", 434, "Date of Injury", "CCYYMMDD"),
    ("CF", 315, "Employer Name", "x(30)"),
    ("CG", 316, "Employer Street Address", "x(30)"),
    ("CH", 317, "Employer City Address", "x(20)"),
    ("CI", 318, "Employer State/Province Address", "x(2)"),
    ("CJ", 319, "Employer ZIP/Postal Zone", "x(15)"),
    ("CK", 320, "Employer Phone Number", "9(10)"),
    ("CL", 321, "Employer Contact Name", "x(30)"),
    ("CR", 327, "Carrier ID", "x(10)"),
    ("DZ", 435, "Claim/Reference ID", "x(30)"),
    ("TR", 117, "Billing Entity Type Indicator", "9(2)"),
    ("TS", 118, "Pay To Qualifier", "x(2)"),
    ("TT", 119, "Pay To ID", "x(15)"),
    ("TU", 120, "Pay To Name", "x(20)"),
    ("TV", 121, "Pay To Street Address", "x(30)"),
    ("TW", 122, "Pay To City Address", "x(20)"),
    ("TX", 123, "Pay To State/Province Address", "x(2)"),
    ("TY", 124, "Pay To ZIP/Postal Zone", "x(15)"),
    ("TZ", 125, "Generic Equivalent Product ID Qualifier", "x(2)"),
    ("UA", 126, "Generic Equivalent Product ID", "x(19)"),
    # --- DUR/PPS (08) ---
    ("7E", 473, "DUR/PPS Code Counter", "9(1)"),
    ("E4", 439, "Reason for Service Code", "x(2)"),
    ("J6", 567, "DUR/PPS Response Code Counter", "9(1)"),
    ("E5", 440, "Professional Service Code", "x(2)"),
    ("E6", 441, "Result of Service Code", "x(2)"),
    ("8E", 474, "DUR/PPS Level of Effort", "9(2)"),
    ("J9", 475, "DUR Co-Agent ID Qualifier", "x(2)"),
    ("H6", 476, "DUR Co-Agent ID", "x(19)"),
    # --- coupon (09) ---
    ("KE", 485, "Coupon Type", "x(2)"),
    ("ME", 486, "Coupon Number", "x(15)"),
    ("NE", 487, "Coupon Value Amount", "s9(6)v99"),
    # --- compound (10) ---
    ("EF", 450, "Compound Dosage Form Description Code", "x(2)"),
    ("EG", 451, "Compound Dispensing Unit Form Indicator", "9(1)"),
    ("EC", 447, "Compound Ingredient Component Count", "9(2)"),
    ("RE", 488, "Compound Product ID Qualifier", "x(2)"),
    ("TE", 489, "Compound Product ID", "x(19)"),
    ("ED", 448, "Compound Ingredient Quantity", "9(7)v999"),
    ("EE", 449, "Compound Ingredient Drug Cost", "s9(6)v99"),
    ("UE", 490, "Compound Ingredient Basis of Cost Determination", "x(2)"),
    ("2G", 362, "Compound Ingredient Modifier Code Count", "9(2)"),
    ("2H", 363, "Compound Ingredient Modifier Code", "x(2)"),
    # --- pricing (11) ---
    ("D9", 409, "Ingredient Cost Submitted", "s9(6)v99"),
    ("DC", 412, "Dispensing Fee Submitted", "s9(6)v99"),
    ("BE", 477, "Professional Service Fee Submitted", "s9(6)v99"),
    ("E3", 438, "Incentive Amount Submitted", "s9(6)v99"),
    ("H7", 478, "Other Amount Claimed Submitted Count", "9(1)"),
    ("H8", 479, "Other Amount Claimed Submitted Qualifier", "x(2)"),
    ("H9", 480, "Other Amount Claimed Submitted", "s9(6)v99"),
    ("HA", 481, "Flat Sales Tax Amount Submitted", "s9(6)v99"),
    ("GE", 482, "Percentage Sales Tax Amount Submitted", "s9(6)v99"),
    ("HE", 483, "Percentage Sales Tax Rate Submitted", "s9(3)v9999"),
    ("JE", 484, "Percentage Sales Tax Basis Submitted", "x(2)"),
    ("DQ", 426, "Usual and Customary Charge", "s9(6)v99"),
    ("DU", 430, "Gross Amount Due", "s9(6)v99"),
    ("DN", 423, "Basis of Cost Determination", "x(2)"),
    ("DX", 433, "Patient Paid Amount Submitted", "s9(6)v99"),
    ("N3", 113, "Medicaid Paid Amount", "s9(6)v99"),
    # --- prior authorization (12) ---
    ("PA", 498, "Request Type", "x(1)"),
    ("PB", 498, "Request Period Date-Begin", "CCYYMMDD"),
    ("PC", 498, "Request Period Date-End", "CCYYMMDD"),
    ("PD", 498, "Basis of Request", "x(2)"),
    ("PE", 498, "Authorized Representative First Name", "x(12)"),
    ("PF", 498, "Authorized Representative Last Name", "x(15)"),
    ("PG", 498, "Authorized Representative Street Address", "x(30)"),
    ("PH", 498, "Authorized Representative City Address", "x(20)"),
    ("PJ", 498, "Authorized Representative State/Province Address", "x(2)"),
    ("PK", 498, "Authorized Representative ZIP/Postal Zone", "x(15)"),
    ("PP", 498, "Prior Authorization Supporting Documentation", "x(500)"),
    ("PY", 498, "Prior Authorization Number-Assigned", "9(11)"),
    # --- clinical (13) ---
    ("VE", 491, "Diagnosis Code Count", "9(1)"),
    ("WE", 492, "Diagnosis Code Qualifier", "x(2)"),
    ("DO", 424, "Diagnosis Code", "x(15)"),
    ("XE", 493, "Clinical Information Counter", "9(1)"),
    ("ZE", 494, "Measurement Date", "CCYYMMDD"),
    ("H1", 495, "Measurement Time", "9(4)"),
    ("H2", 496, "Measurement Dimension", "x(2)"),
    ("H3", 497, "Measurement Unit", "x(2)"),
    ("H4", 499, "Measurement Value", "x(15)"),
    # --- additional documentation (14) ---
    ("2Q", 369, "Additional Documentation Type ID", "x(3)"),
    ("2V", 374, "Request Period Begin Date", "CCYYMMDD"),
    ("2W", 375, "Request Period Recert/Revised Date", "CCYYMMDD"),
    ("2U", 373, "Request Status", "x(1)"),
    ("2S", 371, "Length of Need Qualifier", "x(1)"),
    ("2R", 370, "Length of Need", "9(3)"),
    ("2T", 372, "Prescriber/Supplier Date Signed", "CCYYMMDD"),
    ("2X", 376, "Supporting Documentation", "x(65)"),
    ("2Z", 377, "Question Number/Letter Count", "9(3)"),
    ("4B", 378, "Question Number/Letter", "x(3)"),
    ("4D", 379, "Question Percent Response", "9(3)v99"),
    ("4G", 380, "Question Date Response", "CCYYMMDD"),
    ("4H", 381, "Question Dollar Amount Response", "s9(7)v99"),
    ("4J", 382, "Question Numeric Response", "9(11)"),
    ("4K", 383, "Question Alphanumeric Response", "x(30)"),
    # --- facility (15) ---
    ("8C", 336, "Facility ID", "x(10)"),
    ("3Q", 385, "Facility Name", "x(30)"),
    ("3U", 386, "Facility Street Address", "x(30)"),
    ("5J", 388, "Facility City Address", "x(20)"),
    ("3V", 387, "Facility State/Province Address", "x(2)"),
    ("6D", 389, "Facility ZIP/Postal Zone", "x(15)"),
    # --- narrative (16) ---
    ("BM", 390, "Narrative Message", "x(200)"),
    # --- response status (21) ---
    ("AN", 112, "Transaction Response Status", "x(1)"),
    ("F3", 503, "Authorization Number", "x(20)"),
    ("FA", 510, "Reject Count", "9(2)"),
    ("FB", 511, "Reject Code", "x(3)"),
    ("4F", 546, "Reject Field Occurrence Indicator", "9(2)"),
    ("5F", 547, "Approved Message Code Count", "9(1)"),
    ("6F", 548, "Approved Message Code", "x(3)"),
    ("UF", 130, "Additional Message Information Count", "9(2)"),
    ("UH", 132, "Additional Message Information Qualifier", "x(2)"),
    ("FQ", 526, "Additional Message Information", "x(40)"),
    ("UG", 131, "Additional Message Information Continuity", "x(1)"),
    ("7F", 549, "Help Desk Phone Number Qualifier", "x(2)"),
    ("8F", 550, "Help Desk Phone Number", "x(18)"),
    ("K5", 880, "Transaction Reference Number", "x(10)"),
    ("A7", 993, "Internal Control Number", "x(30)"),
    # --- response message (20) ---
    ("F4", 504, "Message", "x(200)"),
    # --- response insurance (25) / patient (29) ---
    ("2F", 545, "Network Reimbursement ID", "x(10)"),
    ("J7", 568, "Payer ID Qualifier", "x(2)"),
    ("J8", 569, "Payer ID", "x(10)"),
    # --- response claim (22) ---
    ("9F", 551, "Preferred Product Count", "9(1)"),
    ("AP", 552, "Preferred Product ID Qualifier", "x(2)"),
    ("AR", 553, "Preferred Product ID", "x(19)"),
    ("AS", 554, "Preferred Product Incentive", "s9(6)v99"),
    ("AT", 555, "Preferred Product Cost Share Incentive", "s9(6)v99"),
    ("AU", 556, "Preferred Product Description", "x(40)"),
    # --- response pricing (23) ---
    ("F5", 505, "Patient Pay Amount", "s9(6)v99"),
    ("F6", 506, "Ingredient Cost Paid", "s9(6)v99"),
    ("F7", 507, "Dispensing Fee Paid", "s9(6)v99"),
    ("F9", 509, "Total Amount Paid", "s9(6)v99"),
    ("AV", 557, "Tax Exempt Indicator", "x(1)"),
    ("AW", 558, "Flat Sales Tax Amount Paid", "s9(6)v99"),
    ("AX", 559, "Percentage Sales Tax Amount Paid", "s9(6)v99"),
    ("AY", 560, "Percentage Sales Tax Rate Paid", "s9(3)v9999"),
    ("AZ", 561, "Percentage Sales Tax Basis Paid", "x(2)"),
    ("FL", 521, "Incentive Amount Paid", "s9(6)v99"),
    ("J1", 562, "Professional Service Fee Paid", "s9(6)v99"),
    ("J2", 563, "Other Amount Paid Count", "9(1)"),
    ("J3", 564, "Other Amount Paid Qualifier", "x(2)"),
    ("J4", 565, "Other Amount Paid", "s9(6)v99"),
    ("J5", 566, "Other Payer Amount Recognized", "s9(6)v99"),
    ("FM", 522, "Basis of Reimbursement Determination", "9(2)"),
    ("FN", 523, "Amount Attributed to Sales Tax", "s9(6)v99"),
    ("FC", 512, "Accumulated Deductible Amount", "s9(6)v99"),
    ("FD", 513, "Remaining Deductible Amount", "s9(6)v99"),
    ("FE", 514, "Remaining Benefit Amount", "s9(6)v99"),
    ("FH", 517, "Amount Applied to Periodic Deductible", "s9(6)v99"),
    ("FI", 518, "Amount of Copay", "s9(6)v99"),
    ("FJ", 519, "Amount Attributed to Product Selection/Brand Drug", "s9(6)v99"),
    ("FK", 520, "Amount Exceeding Periodic Benefit Maximum", "s9(6)v99"),
    ("NZ", 571, "Amount Attributed to Processor Fee", "s9(6)v99"),
    ("4U", 572, "Amount of Coinsurance", "s9(6)v99"),
    ("4V", 573, "Basis of Calculation-Coinsurance", "x(2)"),
    ("EQ", 575, "Patient Sales Tax Amount", "s9(6)v99"),
    ("2Y", 574, "Plan Sales Tax Amount", "s9(6)v99"),
    ("HH", 346, "Basis of Calculation-Dispensing Fee", "x(2)"),
    ("HJ", 347, "Basis of Calculation-Copay", "x(2)"),
    ("HK", 348, "Basis of Calculation-Flat Sales Tax", "x(2)"),
    ("HM", 349, "Basis of Calculation-Percentage Sales Tax", "x(2)"),
    ("G3", 577, "Estimated Generic Savings", "s9(6)v99"),
    ("UC", 128, "Spending Account Amount Remaining", "s9(6)v99"),
    ("UD", 129, "Health Plan-Funded Assistance Amount", "s9(6)v99"),
    ("UJ", 133, "Amount Attributed to Provider Network Selection", "s9(6)v99"),
    ("UK", 134, "Amount Attributed to Product Selection/Brand Drug", "s9(6)v99"),
    (
        "UM",
        135,
        "Amount Attributed to Product Selection/Non-Preferred Formulary Selection",
        "s9(6)v99",
    ),
    (
        "UN",
        136,
        "Amount Attributed to Product Selection/Brand Non-Preferred Formulary Selection",
        "s9(6)v99",
    ),
    ("UP", 137, "Amount Attributed to Coverage Gap", "s9(6)v99"),
    ("U8", 148, "Ingredient Cost Contracted/Reimbursable Amount", "s9(6)v99"),
    ("U9", 149, "Dispensing Fee Contracted/Reimbursable Amount", "s9(6)v99"),
    # --- response DUR/PPS (24) ---
    ("FY", 544, "DUR Free Text Message", "x(30)"),
    ("FS", 528, "Clinical Significance Code", "x(1)"),
    ("FT", 529, "Other Pharmacy Indicator", "9(1)"),
    ("FU", 530, "Previous Date of Fill", "CCYYMMDD"),
    ("FV", 531, "Quantity of Previous Fill", "9(7)v999"),
    ("FW", 532, "Database Indicator", "x(1)"),
    ("FX", 533, "Other Prescriber Indicator", "9(1)"),
    ("NS", 570, "DUR Additional Text", "x(100)"),
    # --- response prior authorization (26) ---
    ("PR", 498, "Prior Authorization Processed Date", "CCYYMMDD"),
    ("PS", 498, "Prior Authorization Effective Date", "CCYYMMDD"),
    ("PT", 498, "Prior Authorization Expiration Date", "CCYYMMDD"),
    ("RA", 498, "Prior Authorization Quantity", "9(7)v999"),
    ("RB", 498, "Prior Authorization Dollars Authorized", "s9(6)v99"),
    ("PW", 498, "Prior Authorization Number of Refills Authorized", "9(2)"),
    ("PX", 498, "Prior Authorization Quantity Accumulated", "9(7)v999"),
    # --- response insurance additional information (27) ---
    ("UR", 139, "Medicare Part D Coverage Code", "x(1)"),
    ("UQ", 138, "CMS Low Income Cost Sharing (LICS) Level", "x(1)"),
    ("U1", 240, "Contract Number", "x(5)"),
    ("FF", 926, "Formulary ID", "x(8)"),
    ("U6", 757, "Benefit ID", "x(10)"),
    ("US", 140, "Next Medicare Part D Effective Date", "CCYYMMDD"),
    ("UT", 141, "Next Medicare Part D Termination Date", "CCYYMMDD"),
    # --- response COB/other payers (28) ---
    ("NT", 355, "Other Payer ID Count", "9(1)"),
    ("UV", 142, "Other Payer Person Code", "x(3)"),
    ("UB", 127, "Other Payer Help Desk Phone Number", "9(18)"),
    ("UW", 143, "Other Payer Patient Relationship Code", "9(1)"),
    ("UX", 144, "Other Payer Benefit Effective Date", "CCYYMMDD"),
    ("UY", 145, "Other Payer Benefit Termination Date", "CCYYMMDD"),
)


# F6-only fields, from the public schema of transactrx/NCPDPSerDe (decision 0011):
# id and name only. Their data dictionary numbers and widths are not public; dates
# are marked CCYYMMDD, counts and integers 9(?), amounts s9(?)v99 (signed overpunch)
# and quantities 9(?)v999 where the schema types them so (issue 25: the fifteen
# numeric fields KX, KN, RS, 6G, M1, GB, M6, KW, YO, YJ, GA, GR, GJ, KK, KM); every
# other format is unknown ("?", read as text).
_F6_TABLE: tuple[tuple[str, str, str], ...] = (
    # patient (01; RR also in the response patient segment 29)
    ("RR", "Patient ID Count", "9(?)"),
    ("0C", "Patient Middle Name", "?"),
    ("0D", "Patient Name Prefix", "?"),
    ("0E", "Patient Name Suffix", "?"),
    ("7A", "Patient Street Address Line 1", "?"),
    ("7B", "Patient Street Address Line 2", "?"),
    ("1K", "Patient Country Code", "?"),
    ("YR", "Patient ID Associated State/Province Address", "?"),
    ("1Y", "Patient ID Associated Country Code", "?"),
    ("1R", "Veterinary Use Indicator", "?"),
    ("S8", "Species", "?"),
    # claim (07)
    ("XZ", "Associated Prescription/Service Reference Number Qualifier", "?"),
    ("XX", "Associated Prescription/Service Provider ID Qualifier", "?"),
    ("XY", "Associated Prescription/Service Provider ID", "?"),
    ("X0", "Associated Prescription/Service Fill Number", "?"),
    ("34", "Reconciliation ID", "?"),
    ("KZ", "Submission Type Code Count", "9(?)"),
    ("K8", "Submission Type Code", "?"),
    ("M3", "Multiple Order Group ID", "?"),
    ("M4", "Multiple Order Group Reason Code", "?"),
    ("KW", "Total Prescribed Quantity Remaining", "9(?)v999"),
    ("KU", "Preparation Environment Type", "?"),
    ("KT", "Preparation Environment Event Code", "?"),
    ("Y6", "Time of Service", "?"),
    ("ZF", "Sales Transaction ID", "?"),
    ("ZS", "Reported Adjudicated Program Type", "?"),
    ("4P", "Original Manufacturer Product ID Qualifier", "?"),
    ("4N", "Original Manufacturer Product ID", "?"),
    ("KK", "LTPAC Dispense Frequency", "9(?)"),
    ("KH", "LTPAC Billing Methodology", "?"),
    ("KM", "Number of LTPAC Dispensing Events", "9(?)"),
    ("K9", "Do Not Dispense Before Date", "CCYYMMDD"),
    # pricing (11) and response pricing (23)
    ("RK", "Regulatory Fee Count", "9(?)"),
    ("RL", "Regulatory Fee Type Code", "?"),
    ("RM", "Regulatory Fee Exempt Indicator", "?"),
    ("KX", "Subrogation Amount Requested", "s9(?)v99"),
    ("KP", "Patient Pay Component Count", "9(?)"),
    ("KQ", "Patient Pay Component Qualifier", "?"),
    ("KN", "Patient Pay Component Amount", "s9(?)v99"),
    ("RS", "Patient Regulatory Fee Amount", "s9(?)v99"),
    ("6G", "Professional Service Fee Contracted/Reimbursable Amount", "s9(?)v99"),
    # pharmacy provider (02), prescriber (03)
    ("4A", "Provider First Name", "?"),
    ("4M", "Provider Last Name", "?"),
    ("7U", "Prescriber Street Address Line 1", "?"),
    ("7V", "Prescriber Street Address Line 2", "?"),
    ("3C", "Prescriber Country Code", "?"),
    ("ZK", "Prescriber ID Associated State/Province Address", "?"),
    ("3B", "Prescriber ID Associated Country Code", "?"),
    ("7T", "Prescriber Telephone Number Extension", "?"),
    ("0F", "Prescriber Middle Name", "?"),
    ("ZM", "Prescriber Alternate ID Qualifier", "?"),
    ("ZP", "Prescriber Alternate ID", "?"),
    ("ZQ", "Prescriber Alternate ID Associated State/Province Address", "?"),
    ("3A", "Prescriber Alternate ID Associated Country Code", "?"),
    ("KV", "Prescriber DEA Number", "?"),
    ("RG", "Prescriber Place of Service", "?"),
    # COB (05, 28)
    ("9T", "Other Payer Adjudicated Program Type", "?"),
    ("9V", "Other Payer Reconciliation ID", "?"),
    ("P7", "Other Payer Percentage Tax Exempt Indicator", "?"),
    ("P9", "Other Payer Regulatory Fee Type Count", "9(?)"),
    ("RN", "Other Payer Regulatory Fee Type Code", "?"),
    ("P8", "Other Payer Regulatory Fee Exempt Indicator", "?"),
    ("9W", "Benefit Stage Indicator Count", "9(?)"),
    ("9X", "Benefit Stage Indicator", "?"),
    ("PQ", "Other Payer Relationship Type", "?"),
    ("P6", "Other Payer Benefit Classification", "?"),
    ("M5", "Other Payer Name", "?"),
    ("7Q", "Other Payer Help Desk Telephone Number Extension", "?"),
    # workers' compensation (06), facility (15), prior authorization (12), compound (10)
    ("8D", "Employer Street Address Line 1", "?"),
    ("7G", "Employer Street Address Line 2", "?"),
    ("1V", "Employer Country Code", "?"),
    ("7K", "Employer Telephone Number Extension", "?"),
    ("7H", "Employer Contact First Name", "?"),
    ("7J", "Employer Contact Last Name", "?"),
    ("7R", "Pay To Street Address Line 1", "?"),
    ("7S", "Pay To Street Address Line 2", "?"),
    ("1Z", "Pay To Country Code", "?"),
    ("3Z", "Facility ID Qualifier", "?"),
    ("7M", "Facility Street Address Line 1", "?"),
    ("7N", "Facility Street Address Line 2", "?"),
    ("1X", "Facility Country Code", "?"),
    ("7D", "Prior Authorization Authorized Representative Street Address Line 1", "?"),
    ("8B", "Prior Authorization Authorized Representative Street Address Line 2", "?"),
    ("1U", "Prior Authorization Authorized Representative Country Code", "?"),
    ("AG", "Compound Level of Complexity", "?"),
    # intermediary (19, request)
    ("8G", "Intermediary ID Count", "9(?)"),
    ("8H", "Intermediary Type Code", "?"),
    ("8J", "Intermediary Type Entity", "?"),
    ("8K", "Intermediary ID Qualifier", "?"),
    ("8M", "Intermediary ID", "?"),
    ("8N", "Intermediary State/Province Address", "?"),
    ("8U", "Intermediary Country Code", "?"),
    # last known 4Rx (37)
    ("3E", "Last Known IIN Number", "?"),
    ("3F", "Last Known Processor Control Number", "?"),
    ("3G", "Last Known Group ID", "?"),
    ("3H", "Last Known Cardholder ID", "?"),
    ("3J", "Year of Last Paid Claim", "?"),
    ("3K", "Month of Last Paid Claim", "?"),
    # N transaction payer identification (38)
    ("9Y", "Payer IIN", "?"),
    ("9Z", "Payer Processor Control Number", "?"),
    ("AA", "Payer Cardholder ID", "?"),
    ("AB", "Payer Group ID", "?"),
    ("9U", "Payer Adjudicated Program Type", "?"),
    ("AC", "Transaction Source Type", "?"),
    ("AD", "Transaction Reconciliation ID", "?"),
    # response insurance (25), insurance additional information (27)
    ("KR", "Payer ID Count", "9(?)"),
    ("96", "Plan Name", "?"),
    # response status (21)
    ("BH", "Help Desk Support Type Count", "9(?)"),
    ("BG", "Help Desk Support Type", "?"),
    ("BB", "Help Desk Business Unit Type Count", "9(?)"),
    ("BA", "Help Desk Business Unit Type", "?"),
    ("BF", "Help Desk Contact Information Qualifier", "?"),
    ("BC", "Help Desk Contact Information", "?"),
    ("BD", "Help Desk Contact Information Extension", "?"),
    ("ZR", "Adjudicated Program Type", "?"),
    ("BT", "Next Available Fill Date", "CCYYMMDD"),
    # response claim (22)
    ("ZO", "Preferred Product Effective Date", "CCYYMMDD"),
    ("PV", "Preferred Product Plan Benefit Tier", "?"),
    ("PZ", "Preferred Product Reason Code", "?"),
    ("P0", "Required Therapy Indicator Count", "9(?)"),
    ("P1", "Required Therapy Indicator", "?"),
    ("P2", "Required Therapy Time Period Qualifier", "?"),
    ("P3", "Required Therapy Time Period Duration", "?"),
    ("P4", "Required Therapy Time Period Start Date", "CCYYMMDD"),
    ("P5", "Required Therapy Time Period End Date", "CCYYMMDD"),
    ("RC", "Plan Benefit Override Indicator", "?"),
    ("RD", "Plan Benefit Override Value Count", "9(?)"),
    ("RF", "Plan Benefit Override Value", "?"),
    ("F8", "Maximum Age Qualifier", "?"),
    ("GA", "Maximum Age", "9(?)"),
    ("GQ", "Minimum Age Qualifier", "?"),
    ("GR", "Minimum Age", "9(?)"),
    ("M2", "Minimum Amount Qualifier", "?"),
    ("M1", "Minimum Amount", "s9(?)v99"),
    ("GC", "Maximum Amount Qualifier", "?"),
    ("GB", "Maximum Amount", "s9(?)v99"),
    ("GF", "Maximum Amount Time Period", "?"),
    ("GH", "Maximum Amount Time Period End Date", "CCYYMMDD"),
    ("GG", "Maximum Amount Time Period Start Date", "CCYYMMDD"),
    ("GJ", "Maximum Amount Time Period Units", "9(?)"),
    ("M7", "Remaining Amount Qualifier", "?"),
    ("M6", "Remaining Amount", "s9(?)v99"),
    ("AF", "Benefit Type Opportunity Count", "9(?)"),
    ("AE", "Benefit Type Opportunity", "?"),
    ("KY", "Subrogation Requestor's Reconciliation ID", "?"),
    # response DUR/PPS (24)
    ("ZC", "DUR Co-Agent Description", "?"),
    ("Z9", "Other Pharmacy ID Qualifier", "?"),
    ("Z8", "Other Pharmacy ID", "?"),
    ("Z7", "Other Pharmacy Name", "?"),
    ("Z6", "Other Pharmacy Telephone Number", "?"),
    ("ZA", "Unit of Measure for Previous Dispensed Quantity", "?"),
    ("Z4", "Other Prescriber ID Qualifier", "?"),
    ("Z3", "Other Prescriber ID", "?"),
    ("Z5", "Other Prescriber Last Name", "?"),
    ("Z2", "Other Prescriber Telephone Number", "?"),
    ("Z0", "Compound Product ID Qualifier (DUR)", "?"),
    ("Z1", "Compound Product ID (DUR)", "?"),
    ("YO", "Maximum Daily Dose Quantity", "9(?)v999"),
    ("YL", "Maximum Daily Dose Unit of Measure", "?"),
    ("YJ", "Minimum Daily Dose Quantity", "9(?)v999"),
    ("YI", "Minimum Daily Dose Unit of Measure", "?"),
    # response intermediary (36)
    ("8R", "Intermediary Authorization Count", "9(?)"),
    ("8S", "Intermediary Authorization Type ID", "?"),
    ("8T", "Intermediary Authorization ID", "?"),
    ("8Q", "Intermediary Message", "?"),
    ("KC", "Intermediary Help Desk Support Type Count", "9(?)"),
    ("KB", "Intermediary Help Desk Support Type", "?"),
    ("G9", "Intermediary Help Desk Business Unit Type Count", "9(?)"),
    ("G8", "Intermediary Help Desk Business Unit Type", "?"),
    ("KA", "Intermediary Help Desk Contact Information Qualifier", "?"),
    ("JP", "Intermediary Help Desk Contact Information", "?"),
    ("JR", "Intermediary Help Desk Contact Information Extension", "?"),
    # response other related benefit detail (39)
    ("KS", "Plan Type", "?"),
    ("KF", "LIS Level", "?"),
    ("KD", "LIS Effective Date", "CCYYMMDD"),
    ("KG", "LIS Termination Date", "CCYYMMDD"),
    ("AH", "Disability Effective Date", "CCYYMMDD"),
    ("A5", "ESRD Indicator", "?"),
    ("AJ", "ESRD Effective Date", "CCYYMMDD"),
    ("A6", "ESRD Termination Date", "CCYYMMDD"),
    ("G4", "Hospice Effective Date", "CCYYMMDD"),
    ("G7", "Hospice Termination Date", "CCYYMMDD"),
    ("G6", "Hospice Provider Number", "?"),
    ("G5", "Hospice Facility Name", "?"),
    ("A8", "Hospice Telephone Number", "?"),
    ("BJ", "Institutional Indicator", "?"),
    ("BK", "Institutional Effective Date", "CCYYMMDD"),
    ("GD", "Institutional Termination Date", "CCYYMMDD"),
    ("M8", "Other Benefit Count", "9(?)"),
    ("PN", "Other Benefit Type Code", "?"),
    ("MZ", "Other Benefit Effective Date", "CCYYMMDD"),
    ("NN", "Other Benefit Termination Date", "CCYYMMDD"),
    ("TA", "Other Benefit State/Province Address", "?"),
    ("N9", "Other Benefit Type ID", "?"),
    ("N1", "Other Benefit Facility Name", "?"),
    ("N7", "Other Benefit Facility Telephone Number", "?"),
    ("N8", "Other Benefit Detail Information Count", "9(?)"),
    ("MS", "Other Benefit Detail Information Indicator", "?"),
    ("MM", "Other Benefit Detail Information Effective Date", "CCYYMMDD"),
    ("MX", "Other Benefit Detail Information Termination Date", "CCYYMMDD"),
    ("MR", "Other Benefit Detail Information Provider Number", "?"),
    ("MN", "Other Benefit Detail Information Facility Name", "?"),
    ("MP", "Other Benefit Detail Information Facility Telephone Number", "?"),
    # response provider (40)
    ("ZV", "Data Source of Invalid Provider Determination", "?"),
    ("ZZ", "State Code for Data Source of Invalid Provider Determination", "?"),
)


#: The ``9(n)`` fields that are quantities, beside the counts (names ending in "Count"
#: or "Counter"): decoded as numbers. Every other ``9(n)`` field is an identifier or a
#: code and stays a string.
_QUANTITIES = frozenset(
    {
        "D3",  # Fill Number
        "D5",  # Days Supply
        "DF",  # Number of Refills Authorized
        "HG",  # Days Supply Intended To Be Dispensed
        "PW",  # Prior Authorization Number of Refills Authorized
        "2R",  # Length of Need
        "4F",  # Reject Field Occurrence Indicator (an occurrence number)
        "GA",  # Maximum Age (F6)
        "GR",  # Minimum Age (F6)
        "GJ",  # Maximum Amount Time Period Units (F6)
        "KK",  # LTPAC Dispense Frequency (F6)
        "KM",  # Number of LTPAC Dispensing Events (F6)
    }
)


def _integer(fid: str, name: str, fmt: str) -> bool:
    return codec_of(fmt) == "number" and (fid in _QUANTITIES or name.endswith(("Count", "Counter")))


def _build() -> dict[str, FieldDef]:
    out: dict[str, FieldDef] = {}
    for fid, number, name, fmt in _TABLE:
        if fid in out:  # a data error in this table, caught at import and by a test
            raise AssertionError(f"field id {fid} listed twice")
        out[fid] = FieldDef(
            id=fid, number=number, name=name, format=fmt, integer=_integer(fid, name, fmt)
        )
    for fid, name, fmt in _F6_TABLE:
        if fid in out:  # an F6 id the D.0 table already names: a data error
            raise AssertionError(f"F6 field id {fid} is already a D.0 field")
        out[fid] = FieldDef(
            id=fid, number=None, name=name, format=fmt, since="F6", integer=_integer(fid, name, fmt)
        )
    return out


#: Every known field, by its two-character id.
FIELDS: dict[str, FieldDef] = _build()


def field_name(field_id: str) -> str | None:
    """``"D2"`` -> ``"Prescription/Service Reference Number"``; ``None`` if unknown."""
    fd = FIELDS.get(field_id)
    return fd.name if fd is not None else None


#: The ids of the fields F6 added (names from the public schema; numbers unknown).
F6_FIELD_IDS = frozenset(fid for fid, _, _ in _F6_TABLE)
